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

#include "llvm/Analysis/AssumptionCache.h"
#include "llvm/Analysis/LoopInfo.h"
#include "llvm/Analysis/ScalarEvolution.h"
#include "llvm/Analysis/ScalarEvolutionExpressions.h"
#include "llvm/IR/Constants.h"
#include "llvm/IR/Dominators.h"
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
#include "llvm/Transforms/Utils/BasicBlockUtils.h"
#include "llvm/Transforms/Utils/Cloning.h"
#include "llvm/Transforms/Utils/LoopSimplify.h"
#include "llvm/Transforms/Utils/LoopUtils.h"
#include "llvm/Transforms/Utils/ScalarEvolutionExpander.h"
#include "llvm/Transforms/Utils/ValueMapper.h"
#include "llvm/ADT/SmallPtrSet.h"
#include <algorithm>
#include <cstdlib>
#include <set>
#include <string>

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


// ---- Loops recorded as runs (see crates/rt/src/loops.rs) ----
//
// An innermost loop whose every iteration but the last runs its whole body
// (every block with an access, and every exiting block, dominates the latch),
// with no call and no atomic or volatile access, and whose addresses are all
// affine in the iteration, is versioned: the copy TSan instruments, taken while
// the runtime's `__memlens_runs_off` is set, and a bare copy that counts its
// iterations and at each exit calls `__memlens_loop_run(desc,
// starts_and_strides, iterations_done, accesses_of_the_last)`. The runtime
// writes the same events, as two iterations and a `repeat`: no call per
// access. `MEMLENS_LOOP_RUNS=0` at compile time turns this off, `=why` says
// which loops became runs and why the others did not.

struct RunAccess {
  Instruction *I;
  const SCEV *Start, *Step;
  uint64_t Info; // len << 2 | range << 1 | write
};

// Calls that record nothing and cannot reach code that does.
bool quietCall(Instruction &I) {
  auto *II = dyn_cast<IntrinsicInst>(&I);
  if (!II)
    return false;
  if (II->isDebugOrPseudoInst() || II->isAssumeLikeIntrinsic())
    return true;
  switch (II->getIntrinsicID()) {
  case Intrinsic::lifetime_start:
  case Intrinsic::lifetime_end:
    return true;
  default:
    return !II->mayReadOrWriteMemory() && !II->mayHaveSideEffects();
  }
}

struct LoopRuns {
  Module &M;
  LLVMContext &C;
  const DataLayout &DL;
  Type *I64, *I8, *Ptr, *Void;

  explicit LoopRuns(Module &M)
      : M(M), C(M.getContext()), DL(M.getDataLayout()), I64(Type::getInt64Ty(C)),
        I8(Type::getInt8Ty(C)), Ptr(PointerType::getUnqual(C)), Void(Type::getVoidTy(C)) {}

  MDNode *quiet() { return MDNode::get(C, {}); }

  static bool marked(Loop *L) {
    return L->getLoopLatch() && L->getLoopLatch()->getTerminator()->getMetadata("memlens.run");
  }

  // Why the last loop `collect` looked at is not a run.
  const char *Why = "";
  bool no(const char *W) {
    Why = W;
    return false;
  }

  // The accesses of L in program order, or false (and `Why`) when L is not a
  // simple loop.
  bool collect(Loop *L, ScalarEvolution &SE, DominatorTree &DT, LoopInfo &LI,
               AssumptionCache &AC, SmallVectorImpl<RunAccess> &Out) {
    if (!L->isInnermost() || marked(L))
      return no("not innermost");
    if (!L->getLoopLatch())
      return no("no single latch");
    // The end of the pipeline leaves loops without their own preheader or exit.
    if (!L->isLoopSimplifyForm())
      simplifyLoop(L, &DT, &LI, &SE, &AC, nullptr, false);
    if (!L->isLoopSimplifyForm())
      return no("no preheader");
    BasicBlock *Latch = L->getLoopLatch();
    // Every iteration but the last runs the whole body; the last stops at an exit
    // on the chain from the header to the latch, after the accesses above it.
    SmallVector<BasicBlock *, 4> Exiting;
    L->getExitingBlocks(Exiting);
    for (BasicBlock *X : Exiting)
      if (!DT.dominates(X, Latch))
        return no("an exit from a block some iterations skip");
    // (an exit edge gets a block of its own: not possible from an indirectbr)
    Exiting.push_back(Latch);
    for (BasicBlock *X : Exiting)
      if (!isa<BranchInst>(X->getTerminator()) && !isa<SwitchInst>(X->getTerminator()))
        return no("an exit that is not a branch or switch");
    SCEVExpander Check(SE, "memlens");
    SmallVector<BasicBlock *, 8> Blocks(L->blocks());
    std::sort(Blocks.begin(), Blocks.end(), [&](BasicBlock *A, BasicBlock *B) {
      return DT.getNode(A)->getLevel() < DT.getNode(B)->getLevel();
    });
    for (BasicBlock *BB : Blocks) {
      bool EveryIteration = DT.dominates(BB, Latch);
      for (Instruction &I : *BB) {
        if (I.hasMetadata(LLVMContext::MD_nosanitize))
          continue;
        if (isa<CallBase>(I)) {
          if (!quietCall(I))
            return no("a call");
          continue;
        }
        Value *Addr;
        Type *Ty;
        bool Write;
        if (auto *Ld = dyn_cast<LoadInst>(&I)) {
          if (!Ld->isSimple())
            return no("an atomic or volatile load");
          Addr = Ld->getPointerOperand();
          Ty = Ld->getType();
          Write = false;
        } else if (auto *St = dyn_cast<StoreInst>(&I)) {
          if (!St->isSimple())
            return no("an atomic or volatile store");
          Addr = St->getPointerOperand();
          Ty = St->getValueOperand()->getType();
          Write = true;
        } else {
          if (I.mayReadOrWriteMemory())
            return no("another memory operation");
          continue;
        }
        if (!instrumentableAddress(Addr))
          continue; // neither TSan nor this pass records it
        TypeSize TS = DL.getTypeStoreSize(Ty);
        if (!EveryIteration)
          return no("an access not made by every iteration");
        if (TS.isScalable() || TS.getFixedValue() == 0)
          return no("a scalable or empty access");
        uint64_t Bytes = TS.getFixedValue();
        const SCEV *S = SE.getSCEV(Addr);
        const SCEV *Start, *Step;
        if (SE.isLoopInvariant(S, L)) {
          Start = S;
          Step = SE.getZero(I64);
        } else if (auto *AR = dyn_cast<SCEVAddRecExpr>(S);
                   AR && AR->getLoop() == L && AR->isAffine()) {
          Start = AR->getStart();
          Step = AR->getStepRecurrence(SE);
        } else {
          return no("an address not affine in the iteration");
        }
        if (!Check.isSafeToExpand(Start) || !Check.isSafeToExpand(Step) ||
            !Step->getType()->isIntegerTy())
          return no("an address not computable before the loop");
        uint64_t Info = Bytes << 2 | (tsanWidth(Bytes) ? 0 : 2) | (Write ? 1 : 0);
        Out.push_back({&I, Start, Step, Info});
      }
    }
    if (Out.empty())
      return no("no access");

    if (Out.size() > 64)
      return no("more than 64 accesses");
    return true;
  }

  GlobalVariable *descriptor(ArrayRef<RunAccess> Accs) {
    size_t N = Accs.size();
    auto *Arr = ArrayType::get(I64, N);
    auto *Ty = StructType::get(C, {I64, I64, Arr, Arr});
    SmallVector<Constant *, 64> Infos, Zeros;
    for (const RunAccess &A : Accs) {
      Infos.push_back(ConstantInt::get(I64, A.Info));
      Zeros.push_back(ConstantInt::get(I64, 0));
    }
    auto *Init = ConstantStruct::get(
        Ty, {ConstantInt::get(I64, N), ConstantInt::get(I64, 0), ConstantArray::get(Arr, Infos),
             ConstantArray::get(Arr, Zeros)});
    return new GlobalVariable(M, Ty, false, GlobalValue::PrivateLinkage, Init, "memlens.loop");
  }

  void transform(Function &F, Loop *L, ArrayRef<RunAccess> Accs, LoopInfo &LI,
                 DominatorTree &DT, ScalarEvolution &SE) {
    formLCSSA(*L, DT, &LI, &SE);
    BasicBlock *Latch = L->getLoopLatch();
    BasicBlock *Header = L->getHeader();
    Latch->getTerminator()->setMetadata("memlens.run", quiet());
    SmallVector<std::pair<BasicBlock *, BasicBlock *>, 4> ExitEdges;
    {
      SmallVector<Loop::Edge, 4> Edges;
      L->getExitEdges(Edges);
      for (auto &E : Edges)
        ExitEdges.push_back({const_cast<BasicBlock *>(E.first), const_cast<BasicBlock *>(E.second)});
    }
    SmallVector<BasicBlock *, 4> Exits;
    L->getUniqueExitBlocks(Exits);
    SmallPtrSet<BasicBlock *, 16> InLoop(L->block_begin(), L->block_end());

    // The instrumented copy, entered while the runtime says so.
    BasicBlock *Check = L->getLoopPreheader();
    BasicBlock *PH = SplitBlock(Check, Check->getTerminator(), &DT, &LI, nullptr, "memlens.ph");
    ValueToValueMapTy VMap;
    SmallVector<BasicBlock *, 8> Cloned;
    Loop *NL = cloneLoopWithPreheader(PH, Check, L, VMap, ".memlens.each", &LI, &DT, Cloned);
    remapInstructionsInBlocks(Cloned, VMap);
    for (BasicBlock *X : Exits)
      for (PHINode &P : X->phis()) {
        SmallVector<std::pair<Value *, BasicBlock *>, 4> In;
        for (unsigned K = 0; K < P.getNumIncomingValues(); K++)
          if (InLoop.contains(P.getIncomingBlock(K)))
            In.push_back({P.getIncomingValue(K), P.getIncomingBlock(K)});
        for (auto [V, B] : In) {
          Value *NV = VMap.lookup(V);
          P.addIncoming(NV ? NV : V, cast<BasicBlock>(VMap[B]));
        }
      }
    Instruction *Old = Check->getTerminator();
    IRBuilder<> B(Old);
    auto *Off = M.getOrInsertGlobal("__memlens_runs_off", I8);
    LoadInst *Flag = B.CreateLoad(I8, Off);
    Flag->setMetadata(LLVMContext::MD_nosanitize, quiet());
    B.CreateCondBr(B.CreateICmpNE(Flag, ConstantInt::get(I8, 0)), NL->getLoopPreheader(), PH);
    Old->eraseFromParent();
    // (the exits now have both copies above them)
    DT.recalculate(F);

    // The bare copy: nothing in it is recorded as it runs; it counts its iterations.
    for (const RunAccess &A : Accs)
      A.I->setMetadata(LLVMContext::MD_nosanitize, quiet());
    PHINode *Iter = PHINode::Create(I64, 2, "memlens.iter");
    Iter->insertBefore(Header->begin());
    IRBuilder<> LB(Latch->getTerminator());
    Value *Next = LB.CreateAdd(Iter, ConstantInt::get(I64, 1), "memlens.iter.next");
    Iter->addIncoming(ConstantInt::get(I64, 0), PH);
    Iter->addIncoming(Next, Latch);

    size_t N = Accs.size();
    IRBuilder<> E(&*F.getEntryBlock().getFirstInsertionPt());
    auto *ArrTy = ArrayType::get(I64, 2 * N);
    AllocaInst *Arr = E.CreateAlloca(ArrTy, nullptr, "memlens.run.args");
    GlobalVariable *Desc = descriptor(Accs);
    FunctionCallee PcFn = M.getOrInsertFunction("__memlens_loop_pc",
                                                FunctionType::get(Void, {Ptr, I64}, false));
    FunctionCallee RunFn = M.getOrInsertFunction(
        "__memlens_loop_run", FunctionType::get(Void, {Ptr, Ptr, I64, I64}, false));
    // Each exit: the iterations done, and of the one it left, the accesses of the
    // blocks up to the exiting one (they form a chain: see `collect`).
    for (auto [From, To] : ExitEdges) {
      uint64_t Prefix = 0;
      for (const RunAccess &A : Accs)
        Prefix += DT.dominates(A.I->getParent(), From) ? 1 : 0;
      DebugLoc Loc = From->getTerminator()->getDebugLoc();
      BasicBlock *RunBB = SplitEdge(From, To, &DT, &LI, nullptr, "memlens.run");
      Instruction *At = RunBB->getTerminator();
      SCEVExpander Exp(SE, "memlens");
      IRBuilder<> R(At);
      for (size_t J = 0; J < N; J++) {
        Value *Start = Exp.expandCodeFor(Accs[J].Start, Accs[J].Start->getType(), At);
        Value *Step = Exp.expandCodeFor(Accs[J].Step, Accs[J].Step->getType(), At);
        R.SetInsertPoint(At);
        R.SetCurrentDebugLocation(Loc);
        Value *S = Start->getType()->isPointerTy() ? R.CreatePtrToInt(Start, I64)
                                                    : R.CreateSExtOrTrunc(Start, I64);
        Value *St = R.CreateSExtOrTrunc(Step, I64);
        for (auto [K, V] : {std::pair<size_t, Value *>{2 * J, S}, {2 * J + 1, St}}) {
          Value *Slot = R.CreateConstInBoundsGEP2_64(ArrTy, Arr, 0, K);
          R.CreateStore(V, Slot)->setMetadata(LLVMContext::MD_nosanitize, quiet());
        }
      }
      // The first time, the code addresses: one call per access, at its location.
      R.SetInsertPoint(At);
      R.SetCurrentDebugLocation(Loc);
      Value *ReadyP = R.CreateConstInBoundsGEP2_32(Desc->getValueType(), Desc, 0, 1);
      LoadInst *Ready = R.CreateLoad(I64, ReadyP);
      Ready->setMetadata(LLVMContext::MD_nosanitize, quiet());
      Instruction *Then =
          SplitBlockAndInsertIfThen(R.CreateICmpEQ(Ready, ConstantInt::get(I64, 0)), At, false);
      IRBuilder<> P(Then);
      for (size_t J = 0; J < N; J++) {
        CallInst *CI = P.CreateCall(PcFn, {Desc, ConstantInt::get(I64, J)});
        CI->setDebugLoc(Accs[J].I->getDebugLoc());
      }
      // (SplitBlockAndInsertIfThen moved `At` into the tail block.)
      IRBuilder<> T(At);
      T.SetCurrentDebugLocation(Loc);
      T.CreateCall(RunFn, {Desc, Arr, Iter, ConstantInt::get(I64, Prefix)});
      // SplitBlockAndInsertIfThen left the tree stale for the next exit.
      DT.recalculate(F);
    }
  }

  // `MEMLENS_LOOP_RUNS=why`: a line on stderr per innermost loop.
  bool Explain = false;
  std::set<std::pair<Function *, BasicBlock *>> Explained;
  void explain(Function &F, Loop *L, const char *Why, size_t N = 0) {
    if (!Explained.insert({&F, L->getHeader()}).second)
      return;
    DebugLoc D = L->getStartLoc();
    errs() << "memlens: loop at " << (D ? D->getFilename() : "?") << ":"
           << (D ? D->getLine() : 0) << " in " << F.getName() << ": ";
    if (Why)
      errs() << "not a run (" << Why << ")\n";
    else
      errs() << "run of " << N << " accesses an iteration\n";
  }

  bool function(Function &F, FunctionAnalysisManager &FAM) {
    if (F.isDeclaration() || !F.hasFnAttribute(Attribute::SanitizeThread) ||
        F.hasFnAttribute(Attribute::Naked) || F.hasFnAttribute(Attribute::OptimizeNone) ||
        F.hasFnAttribute(Attribute::DisableSanitizerInstrumentation))
      return false;
    bool Changed = false;
    for (;;) {
      auto &LI = FAM.getResult<LoopAnalysis>(F);
      auto &DT = FAM.getResult<DominatorTreeAnalysis>(F);
      auto &SE = FAM.getResult<ScalarEvolutionAnalysis>(F);
      auto &AC = FAM.getResult<AssumptionAnalysis>(F);
      Loop *Pick = nullptr;
      SmallVector<RunAccess, 16> Accs;
      for (Loop *L : LI.getLoopsInPreorder()) {
        Accs.clear();
        if (collect(L, SE, DT, LI, AC, Accs)) {
          Pick = L;
          break;
        }
        if (Explain && L->isInnermost() && !marked(L))
          explain(F, L, Why);
      }
      if (!Pick)
        break;
      if (Explain)
        explain(F, Pick, nullptr, Accs.size());
      transform(F, Pick, Accs, LI, DT, SE);
      Changed = true;
      FAM.invalidate(F, PreservedAnalyses::none());
    }
    return Changed;
  }
};

struct MemlensPass : PassInfoMixin<MemlensPass> {
  PreservedAnalyses run(Module &M, ModuleAnalysisManager &MAM) {
    Instrumenter In(M);
    bool Changed = false;
    const char *Runs = std::getenv("MEMLENS_LOOP_RUNS");
    if (!Runs || std::string(Runs) != "0") {
      auto &FAM = MAM.getResult<FunctionAnalysisManagerModuleProxy>(M).getManager();
      LoopRuns LR(M);
      LR.Explain = Runs && std::string(Runs) == "why";
      for (Function &F : M)
        Changed |= LR.function(F, FAM);
    }
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
