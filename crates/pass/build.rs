//! Builds `llvm/memlens_pass.cpp` into a clang pass plugin when LLVM's headers are
//! installed (Debian: `llvm-22-dev`). Without them the crate still builds, with an
//! empty plugin, and `memlens cc` says at compile time what it cannot see.

use std::path::{Path, PathBuf};
use std::process::Command;

fn output(cmd: &str, args: &[&str]) -> Option<String> {
    let o = Command::new(cmd).args(args).output().ok()?;
    o.status.success().then(|| String::from_utf8_lossy(&o.stdout).trim().to_string())
}

fn main() {
    let src = "llvm/memlens_pass.cpp";
    println!("cargo:rerun-if-changed={src}");
    println!("cargo:rerun-if-env-changed=MEMLENS_LLVM_CONFIG");
    println!("cargo:rerun-if-env-changed=MEMLENS_PASS_CXX");
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap()).join("libmemlens_pass.so");
    let built = build(Path::new(src), &out);
    match built {
        Ok(major) => println!("cargo:rustc-env=MEMLENS_PASS_LLVM_MAJOR={major}"),
        Err(why) => {
            // Build again once the headers are installed (a missing path always
            // counts as changed; the failing probe above is cheap).
            println!("cargo:rerun-if-changed=/usr/lib/llvm-22/include/llvm/Plugins/PassPlugin.h");
            println!("cargo:warning=memlens-pass: LLVM pass plugin not built ({why}); memlens cc will not see vector, masked and gather accesses with clang");
            std::fs::write(&out, b"").unwrap();
            println!("cargo:rustc-env=MEMLENS_PASS_LLVM_MAJOR=0");
        }
    }
    println!("cargo:rustc-env=MEMLENS_PASS_SO={}", out.display());
}

fn build(src: &Path, out: &Path) -> Result<String, String> {
    let configs: Vec<String> = match std::env::var("MEMLENS_LLVM_CONFIG") {
        Ok(c) if !c.is_empty() => vec![c],
        _ => vec!["llvm-config-22".into(), "llvm-config".into()],
    };
    let (config, version) = configs
        .iter()
        .find_map(|c| output(c, &["--version"]).map(|v| (c.clone(), v)))
        .ok_or("no llvm-config-22 on PATH; install llvm-22-dev")?;
    let major = version.split('.').next().unwrap_or("").to_string();
    let inc = output(&config, &["--includedir"]).ok_or("llvm-config --includedir failed")?;
    if !Path::new(&inc).join("llvm/Plugins/PassPlugin.h").is_file()
        && !Path::new(&inc).join("llvm/Passes/PassPlugin.h").is_file()
    {
        return Err(format!("LLVM {version} headers missing in {inc}; install llvm-{major}-dev"));
    }
    let cxxflags = output(&config, &["--cxxflags"]).ok_or("llvm-config --cxxflags failed")?;
    let compilers: Vec<String> = match std::env::var("MEMLENS_PASS_CXX") {
        Ok(c) if !c.is_empty() => vec![c],
        _ => vec![format!("clang++-{major}"), "clang++".into(), "c++".into(), "g++".into()],
    };
    let cxx = compilers
        .iter()
        .find(|c| output(c, &["--version"]).is_some())
        .ok_or("no C++ compiler found")?;
    let st = Command::new(cxx)
        .args(["-shared", "-fPIC", "-fno-rtti", "-O2", "-w"])
        .args(cxxflags.split_whitespace())
        .arg(src)
        .arg("-o")
        .arg(out)
        .status()
        .map_err(|e| format!("cannot run {cxx}: {e}"))?;
    if !st.success() {
        return Err(format!("{cxx} failed on {}", src.display()));
    }
    Ok(major)
}
