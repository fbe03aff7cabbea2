//! Compiling the kernels with NVRTC: PTX for a virtual architecture (what CI checks without a
//! GPU), or a cubin for the exact GPU, cached on disk under a hash of the source, the options and
//! the NVRTC version so that a restart skips the compiler.

use super::probe::{require, CudaLibrary};
use super::sources::KernelSource;
use cudarc::nvrtc::{result, sys};
use std::ffi::{c_char, CString};
use std::path::PathBuf;

/// What to compile to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// PTX for `compute_XY` (for example 90 for Hopper).
    Ptx(u32),
    /// Machine code for `sm_XY`.
    Cubin(u32),
}

impl Target {
    fn arch_option(self) -> String {
        match self {
            Target::Ptx(arch) => format!("--gpu-architecture=compute_{arch}"),
            Target::Cubin(arch) => format!("--gpu-architecture=sm_{arch}"),
        }
    }
}

/// A compiled kernel file.
#[derive(Debug, Clone)]
pub struct Compiled {
    /// PTX text or cubin bytes.
    pub image: Vec<u8>,
    /// What the compiler printed (warnings), empty when it printed nothing.
    pub log: String,
}

/// Options every kernel file is compiled with.
fn options(target: Target) -> Vec<String> {
    vec![
        target.arch_option(),
        "--std=c++17".to_string(),
        "--fmad=true".to_string(),
        "--extra-device-vectorization".to_string(),
    ]
}

/// The NVRTC version as (major, minor).
pub fn version() -> Result<(i32, i32), String> {
    require(CudaLibrary::Nvrtc)?;
    let (mut major, mut minor) = (0, 0);
    // Safety: NVRTC is loaded (checked above); the out-pointers are valid.
    unsafe { sys::nvrtcVersion(&mut major, &mut minor) }
        .result()
        .map_err(|e| format!("nvrtcVersion failed: {e:?}"))?;
    Ok((major, minor))
}

fn c_text(bytes: &[c_char]) -> String {
    let bytes: Vec<u8> = bytes
        .iter()
        .map(|&c| c as u8)
        .take_while(|&b| b != 0)
        .collect();
    String::from_utf8_lossy(&bytes).trim().to_string()
}

/// Compiles one kernel file for `target`.
pub fn compile(source: &KernelSource, target: Target) -> Result<Compiled, String> {
    compile_with(source, target, &[])
}

/// Compiles one kernel file for `target` with `extra` options after the standard ones.
fn compile_with(source: &KernelSource, target: Target, extra: &[&str]) -> Result<Compiled, String> {
    require(CudaLibrary::Nvrtc)?;
    let text = CString::new(source.program())
        .map_err(|_| format!("{} contains a NUL byte", source.name))?;
    let name = CString::new(source.name).expect("file names have no NUL");
    let program = result::create_program(&text, Some(&name))
        .map_err(|e| format!("{}: {e:?}", source.name))?;
    // Safety: `program` was created above and is destroyed once, at the end of this block; `text`
    // and `name` outlive it.
    let outcome = unsafe {
        let mut all = options(target);
        all.extend(extra.iter().map(|o| o.to_string()));
        let compiled = result::compile_program(program, &all);
        let log = result::get_program_log(program)
            .map(|l| c_text(&l))
            .unwrap_or_default();
        let image = match compiled {
            Err(e) => Err(format!("{} did not compile ({e:?}):\n{log}", source.name)),
            Ok(()) => match target {
                Target::Ptx(_) => result::get_ptx(program)
                    .map(|p| c_text(&p).into_bytes())
                    .map_err(|e| format!("{}: no PTX: {e:?}", source.name)),
                Target::Cubin(_) => cubin(program).map_err(|e| format!("{}: {e}", source.name)),
            },
        };
        let _ = result::destroy_program(program);
        image.map(|image| Compiled { image, log })
    };
    outcome
}

/// The cubin of a compiled program.
///
/// # Safety
/// `program` must be a live, compiled NVRTC program.
unsafe fn cubin(program: sys::nvrtcProgram) -> Result<Vec<u8>, String> {
    let mut size = 0usize;
    sys::nvrtcGetCUBINSize(program, &mut size)
        .result()
        .map_err(|e| format!("no cubin size: {e:?}"))?;
    let mut image = vec![0u8; size];
    sys::nvrtcGetCUBIN(program, image.as_mut_ptr().cast())
        .result()
        .map_err(|e| format!("no cubin: {e:?}"))?;
    Ok(image)
}

/// Where compiled kernels are kept between runs.
fn cache_folder() -> PathBuf {
    if let Some(folder) = std::env::var_os("SWITCHYARD_KERNEL_CACHE") {
        return PathBuf::from(folder);
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir);
    base.join("switchyard").join("kernels")
}

/// The cubin of `source` for `sm_{arch}`, from the disk cache or freshly compiled (and then
/// cached; a cache that cannot be written only costs the next start a compile).
pub fn cubin_cached(source: &KernelSource, arch: u32) -> Result<Vec<u8>, String> {
    let target = Target::Cubin(arch);
    let (major, minor) = version()?;
    let key = xxhash_rust::xxh3::xxh3_64(
        format!(
            "{}\n{:?}\nnvrtc {major}.{minor}",
            source.program(),
            options(target)
        )
        .as_bytes(),
    );
    let path = cache_folder().join(format!(
        "{}-sm{arch}-{key:016x}.cubin",
        source.name.trim_end_matches(".cu")
    ));
    if let Ok(image) = std::fs::read(&path) {
        if !image.is_empty() {
            return Ok(image);
        }
    }
    let compiled = compile(source, target)?;
    if !compiled.log.is_empty() {
        tracing::warn!(file = source.name, log = %compiled.log, "NVRTC printed warnings");
    }
    let written = std::fs::create_dir_all(cache_folder()).and_then(|_| {
        let partial = path.with_extension("partial");
        std::fs::write(&partial, &compiled.image)?;
        std::fs::rename(&partial, &path)
    });
    if let Err(e) = written {
        tracing::debug!(path = %path.display(), error = %e, "kernel cache not written");
    }
    Ok(compiled.image)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// CI installs NVRTC from PyPI (`nvidia-cuda-nvrtc-cu12`) and sets
    /// `SWITCHYARD_REQUIRE_NVRTC=1`, which turns a missing NVRTC into a failure.
    #[test]
    fn every_kernel_compiles_to_ptx_for_ampere_and_hopper_without_warnings() {
        if let Err(why) = require(CudaLibrary::Nvrtc) {
            assert!(
                std::env::var_os("SWITCHYARD_REQUIRE_NVRTC").is_none(),
                "SWITCHYARD_REQUIRE_NVRTC is set but {why}"
            );
            eprintln!("skipped: {why}");
            return;
        }
        let sizes = crate::backend::cuda::compile_kernels_to_ptx(&[80, 90]).unwrap();
        assert_eq!(
            sizes.len(),
            2 * crate::backend::cuda::sources::SOURCES.len()
        );
    }

    /// ptxas's report for the cubins (NVRTC builds them without a GPU): a kernel that needs a
    /// stack frame or spills registers to local memory has lost the registers it was written for.
    #[test]
    fn no_kernel_spills_registers_on_ampere_or_hopper() {
        if require(CudaLibrary::Nvrtc).is_err() {
            eprintln!("skipped: no NVRTC");
            return;
        }
        for source in crate::backend::cuda::sources::SOURCES {
            for arch in [80, 90] {
                let report = compile_with(source, Target::Cubin(arch), &["--ptxas-options=-v"])
                    .unwrap_or_else(|e| panic!("sm_{arch}: {e}"))
                    .log;
                let frames: Vec<&str> = report
                    .lines()
                    .filter(|l| l.contains("stack frame"))
                    .collect();
                assert_eq!(frames.len(), source.kernels.len(), "{report}");
                for line in frames {
                    assert!(
                        line.contains(" 0 bytes stack frame, 0 bytes spill stores"),
                        "{} on sm_{arch}: {line}",
                        source.name
                    );
                }
            }
        }
    }
}
