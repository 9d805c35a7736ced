// The memlens LLVM pass plugin: records the memory operations that clang's
// ThreadSanitizer pass leaves out, so that `memlens cc` sees every access.
//
// clang's TSan pass (which memlens uses for plain accesses, atomics, memory
// intrinsics and function entry/exit) instruments loads and stores of 1, 2, 4, 8
// and 16 bytes only, skips loads of constant data (they cannot race), and knows
// nothing of masked, expanding/compressing and gather/scatter intrinsics. A race
// detector can do without those; a memory tracer cannot. This pass runs at the
// end of the optimisation pipeline, just before TSan (plugin callbacks are
// registered first), and instruments exactly that complement:
//
//   * a plain load or store of any other width (32- and 64-byte vectors,
//     `long double`, odd-sized vectors)    -> __tsan_read_range / __tsan_write_range
//   * a load of constant data (a constant global, a vtable) -> __tsan_readN / range
//   * llvm.masked.load/store, x86 maskload/maskstore -> __memlens_masked_{read,write}
//   * llvm.masked.expandload/compressstore -> __memlens_packed_{read,write}
//   * llvm.masked.gather/scatter, x86 AVX2/AVX-512 gathers and scatters
//                                           -> __memlens_lane_{read,write} per lane
//
// Non-escaping locals are left to TSan itself, told with
// `-tsan-omit-by-pointer-capturing=0` (see crates/cli/src/cc.rs).
//
// Built by crates/pass/build.rs against the llvm-22 headers; loaded by
// `clang -fpass-plugin=`.

#include "llvm/IR/Constants.h"
#include "llvm/IR/DataLayout.h"
#include "llvm/IR/Function.h"
#include "llvm/IR/IRBuilder.h"
#include "llvm/IR/InstIterator.h"
#include "llvm/IR/Instructions.h"
#include "llvm/IR/IntrinsicInst.h"
#include "llvm/IR/Intrinsics.h"
#include "llvm/IR/Module.h"
#include "llvm/IR/PassManager.h"
#include "llvm/Passes/PassBuilder.h"
#include "llvm/Plugins/PassPlugin.h"

using namespace llvm;

namespace {

// The TSan pass's own test: a load whose address is a constant global or a
// vtable slot is left out.
bool pointsToConstantData(Value *Addr) {
  if (auto *GEP = dyn_cast<GetElementPtrInst>(Addr))
    Addr = GEP->getPointerOperand();
  if (auto *GV = dyn_cast<GlobalVariable>(Addr))
    return GV->isConstant();
  if (auto *L = dyn_cast<LoadInst>(Addr))
    if (MDNode *Tag = L->getMetadata(LLVMContext::MD_tbaa))
      return Tag->isTBAAVtableAccess();
  return false;
}

// TSan leaves out other address spaces and PGO counters; so do we (their
// addresses are not flat, or they are the instrumentation's own).
bool instrumentableAddress(Value *Addr) {
  Value *Base = Addr->stripInBoundsOffsets();
  if (auto *GV = dyn_cast<GlobalVariable>(Base))
    if (GV->hasSection() && GV->getSection().contains("__llvm_prf_"))
      return false;
  auto *PT = dyn_cast<PointerType>(Addr->getType()->getScalarType());
  return PT && PT->getAddressSpace() == 0;
}

bool tsanWidth(uint64_t Bytes) {
  return Bytes == 1 || Bytes == 2 || Bytes == 4 || Bytes == 8 || Bytes == 16;
}

struct Instrumenter {
  Module &M;
  const DataLayout &DL;
  LLVMContext &C;
  Type *I64, *I32, *Ptr, *Void;

  explicit Instrumenter(Module &M)
      : M(M), DL(M.getDataLayout()), C(M.getContext()),
        I64(Type::getInt64Ty(C)), I32(Type::getInt32Ty(C)),
        Ptr(PointerType::getUnqual(C)), Void(Type::getVoidTy(C)) {}

  FunctionCallee fn(StringRef Name, ArrayRef<Type *> Args) {
    return M.getOrInsertFunction(Name, FunctionType::get(Void, Args, false));
  }

  // A plain access that TSan will not record.
  void plain(Instruction *I, Value *Addr, Type *Ty, bool Write) {
    TypeSize TS = DL.getTypeStoreSize(Ty);
    IRBuilder<> B(I);
    Value *Len;
    if (TS.isScalable())
      Len = B.CreateTypeSize(I64, TS);
    else
      Len = ConstantInt::get(I64, TS.getFixedValue());
    if (!TS.isScalable() && !Write && tsanWidth(TS.getFixedValue())) {
      std::string N = "__tsan_read" + std::to_string(TS.getFixedValue());
      B.CreateCall(fn(N, {Ptr}), {Addr});
      return;
    }
    B.CreateCall(fn(Write ? "__tsan_write_range" : "__tsan_read_range", {Ptr, I64}),
                 {Addr, Len});
  }

  // A vector of lane-active bits as an i64 (at most 64 lanes).
  Value *maskBits(IRBuilder<> &B, Value *Mask) {
    auto *VT = cast<FixedVectorType>(Mask->getType());
    unsigned N = VT->getNumElements();
    Value *Bits = B.CreateBitCast(Mask, IntegerType::get(C, N));
    return B.CreateZExtOrTrunc(Bits, I64);
  }

  // An x86 sign-bit mask vector (maskload, AVX2 gathers) as lane-active bits.
  Value *signMask(IRBuilder<> &B, Value *Mask) {
    auto *VT = cast<FixedVectorType>(Mask->getType());
    unsigned EB = VT->getScalarSizeInBits();
    auto *IntVT = FixedVectorType::get(IntegerType::get(C, EB), VT->getNumElements());
    Value *AsInt = B.CreateBitCast(Mask, IntVT);
    return B.CreateICmpSLT(AsInt, Constant::getNullValue(IntVT));
  }

  uint64_t elemBytes(Type *VecTy) {
    return DL.getTypeStoreSize(cast<VectorType>(VecTy)->getElementType()).getFixedValue();
  }

  void contiguous(Instruction *I, const char *Name, Value *Addr, Value *LaneMask, Type *VecTy) {
    if (!isa<FixedVectorType>(LaneMask->getType()) ||
        cast<FixedVectorType>(LaneMask->getType())->getNumElements() > 64)
      return;
    IRBuilder<> B(I);
    B.CreateCall(fn(Name, {Ptr, I64, I64}),
                 {Addr, maskBits(B, LaneMask), ConstantInt::get(I64, elemBytes(VecTy))});
  }

  // One call per lane: its address and whether it is active.
  void lanes(Instruction *I, bool Write, Value *Ptrs, Value *LaneMask, Type *VecTy) {
    auto *PT = dyn_cast<FixedVectorType>(Ptrs->getType());
    if (!PT)
      return;
    IRBuilder<> B(I);
    FunctionCallee F = fn(Write ? "__memlens_lane_write" : "__memlens_lane_read", {Ptr, I64, I64});
    Value *Elem = ConstantInt::get(I64, elemBytes(VecTy));
    for (unsigned L = 0; L < PT->getNumElements(); L++) {
      Value *P = B.CreateExtractElement(Ptrs, L);
      Value *A = B.CreateZExt(B.CreateExtractElement(LaneMask, L), I64);
      B.CreateCall(F, {P, A, Elem});
    }
  }

  // x86 gathers/scatters: a base pointer, an index vector and a scale.
  void x86Lanes(Instruction *I, bool Write, Value *Base, Value *Idx, Value *LaneMask,
                Value *Scale, Type *VecTy) {
    auto *IT = dyn_cast<FixedVectorType>(Idx->getType());
    auto *MT = dyn_cast<FixedVectorType>(LaneMask->getType());
    if (!IT || !MT)
      return;
    unsigned N = std::min(IT->getNumElements(), MT->getNumElements());
    IRBuilder<> B(I);
    FunctionCallee F = fn(Write ? "__memlens_lane_write" : "__memlens_lane_read", {Ptr, I64, I64});
    Value *Elem = ConstantInt::get(I64, elemBytes(VecTy));
    Value *Sc = B.CreateZExtOrTrunc(Scale, I64);
    Value *BaseInt = B.CreatePtrToInt(Base, I64);
    for (unsigned L = 0; L < N; L++) {
      Value *Ix = B.CreateSExtOrTrunc(B.CreateExtractElement(Idx, L), I64);
      Value *Addr = B.CreateIntToPtr(B.CreateAdd(BaseInt, B.CreateMul(Ix, Sc)), Ptr);
      Value *A = B.CreateZExt(B.CreateExtractElement(LaneMask, L), I64);
      B.CreateCall(F, {Addr, A, Elem});
    }
  }

  // An integer mask (`i8`/`i16` in older AVX-512 intrinsics) as a vector of i1.
  Value *intMaskLanes(IRBuilder<> &B, Value *Mask, unsigned N) {
    unsigned W = Mask->getType()->getIntegerBitWidth();
    Value *M = Mask;
    if (W < N)
      M = B.CreateZExt(M, IntegerType::get(C, N));
    else if (W > N)
      M = B.CreateTrunc(M, IntegerType::get(C, N));
    return B.CreateBitCast(M, FixedVectorType::get(Type::getInt1Ty(C), N));
  }

  void intrinsic(IntrinsicInst *II) {
    switch (II->getIntrinsicID()) {
    case Intrinsic::masked_load:
      if (instrumentableAddress(II->getArgOperand(0)))
        contiguous(II, "__memlens_masked_read", II->getArgOperand(0), II->getArgOperand(1),
                   II->getType());
      return;
    case Intrinsic::masked_store:
      if (instrumentableAddress(II->getArgOperand(1)))
        contiguous(II, "__memlens_masked_write", II->getArgOperand(1), II->getArgOperand(2),
                   II->getArgOperand(0)->getType());
      return;
    case Intrinsic::masked_expandload:
      if (instrumentableAddress(II->getArgOperand(0)))
        contiguous(II, "__memlens_packed_read", II->getArgOperand(0), II->getArgOperand(1),
                   II->getType());
      return;
    case Intrinsic::masked_compressstore:
      if (instrumentableAddress(II->getArgOperand(1)))
        contiguous(II, "__memlens_packed_write", II->getArgOperand(1), II->getArgOperand(2),
                   II->getArgOperand(0)->getType());
      return;
    case Intrinsic::masked_gather:
      if (instrumentableAddress(II->getArgOperand(0)))
        lanes(II, false, II->getArgOperand(0), II->getArgOperand(1), II->getType());
      return;
    case Intrinsic::masked_scatter:
      if (instrumentableAddress(II->getArgOperand(1)))
        lanes(II, true, II->getArgOperand(1), II->getArgOperand(2),
              II->getArgOperand(0)->getType());
      return;
    default:
      break;
    }
    StringRef Name = II->getCalledFunction() ? II->getCalledFunction()->getName() : "";
    if (!Name.starts_with("llvm.x86."))
      return;
    IRBuilder<> B(II);
    if (Name.contains(".maskload.")) {
      // (ptr, sign-bit mask) -> vector
      Value *LM = signMask(B, II->getArgOperand(1));
      contiguous(II, "__memlens_masked_read", II->getArgOperand(0), LM, II->getType());
    } else if (Name.contains(".maskstore.")) {
      // (ptr, sign-bit mask, value)
      Value *LM = signMask(B, II->getArgOperand(1));
      contiguous(II, "__memlens_masked_write", II->getArgOperand(0), LM,
                 II->getArgOperand(2)->getType());
    } else if (Name.starts_with("llvm.x86.avx2.gather.")) {
      // (src, base, index, sign-bit mask, i8 scale) -> vector
      Value *LM = signMask(B, II->getArgOperand(3));
      x86Lanes(II, false, II->getArgOperand(1), II->getArgOperand(2), LM, II->getArgOperand(4),
               II->getType());
    } else if (Name.starts_with("llvm.x86.avx512.mask.gather") ||
               Name.starts_with("llvm.x86.avx512.gather")) {
      if (Name.contains("gatherpf"))
        return;
      // (src, base, index, mask (<N x i1> or iN), i32 scale) -> vector
      auto *RT = cast<FixedVectorType>(II->getType());
      Value *M = II->getArgOperand(3);
      Value *LM = M->getType()->isIntegerTy() ? intMaskLanes(B, M, RT->getNumElements()) : M;
      x86Lanes(II, false, II->getArgOperand(1), II->getArgOperand(2), LM, II->getArgOperand(4),
               RT);
    } else if (Name.starts_with("llvm.x86.avx512.mask.scatter") ||
               Name.starts_with("llvm.x86.avx512.scatter")) {
      if (Name.contains("scatterpf"))
        return;
      // (base, mask (<N x i1> or iN), index, value, i32 scale)
      auto *VT = cast<FixedVectorType>(II->getArgOperand(3)->getType());
      Value *M = II->getArgOperand(1);
      Value *LM = M->getType()->isIntegerTy() ? intMaskLanes(B, M, VT->getNumElements()) : M;
      x86Lanes(II, true, II->getArgOperand(0), II->getArgOperand(2), LM, II->getArgOperand(4),
               VT);
    }
  }

  bool function(Function &F) {
    // The same scope as TSan's memory-access instrumentation.
    if (F.isDeclaration() || !F.hasFnAttribute(Attribute::SanitizeThread) ||
        F.hasFnAttribute(Attribute::Naked) ||
        F.hasFnAttribute(Attribute::DisableSanitizerInstrumentation))
      return false;
    SmallVector<Instruction *, 32> Work;
    for (Instruction &I : instructions(F)) {
      if (I.hasMetadata(LLVMContext::MD_nosanitize))
        continue;
      if (isa<LoadInst>(I) || isa<StoreInst>(I) || isa<IntrinsicInst>(I))
        Work.push_back(&I);
    }
    for (Instruction *I : Work) {
      if (auto *L = dyn_cast<LoadInst>(I)) {
        if (L->isAtomic() || !instrumentableAddress(L->getPointerOperand()))
          continue;
        TypeSize TS = DL.getTypeStoreSize(L->getType());
        if (TS.isScalable() || !tsanWidth(TS.getFixedValue()) ||
            pointsToConstantData(L->getPointerOperand()))
          plain(L, L->getPointerOperand(), L->getType(), false);
      } else if (auto *S = dyn_cast<StoreInst>(I)) {
        if (S->isAtomic() || !instrumentableAddress(S->getPointerOperand()))
          continue;
        Type *Ty = S->getValueOperand()->getType();
        TypeSize TS = DL.getTypeStoreSize(Ty);
        if (TS.isScalable() || !tsanWidth(TS.getFixedValue()))
          plain(S, S->getPointerOperand(), Ty, true);
      } else if (auto *II = dyn_cast<IntrinsicInst>(I)) {
        intrinsic(II);
      }
    }
    return !Work.empty();
  }
};

struct MemlensPass : PassInfoMixin<MemlensPass> {
  PreservedAnalyses run(Module &M, ModuleAnalysisManager &) {
    Instrumenter In(M);
    bool Changed = false;
    for (Function &F : M)
      Changed |= In.function(F);
    return Changed ? PreservedAnalyses::none() : PreservedAnalyses::all();
  }
  static bool isRequired() { return true; }
};

} // namespace

extern "C" LLVM_ATTRIBUTE_WEAK PassPluginLibraryInfo llvmGetPassPluginInfo() {
  return {LLVM_PLUGIN_API_VERSION, "memlens", "1", [](PassBuilder &PB) {
            PB.registerOptimizerLastEPCallback(
                [](ModulePassManager &MPM, OptimizationLevel, ThinOrFullLTOPhase) {
                  MPM.addPass(MemlensPass());
                });
          }};
}
