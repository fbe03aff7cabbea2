//! Finding the CUDA libraries before anything calls them: cudarc loads them at run time and
//! panics when one is missing, so every entry point of the backend checks here first.
//!
//! The dynamic linker's search (`LD_LIBRARY_PATH`, the ld.so cache) comes first; after it the
//! usual toolkit folders are tried by full path, for CUDA 13 and CUDA 12 names, and a library
//! found there stays loaded so that cudarc's own lookup by name finds it.

use std::path::PathBuf;
use std::sync::OnceLock;

/// A CUDA library the backend needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CudaLibrary {
    /// The driver API (`libcuda.so.1`), installed with the GPU driver.
    Driver,
    /// The run-time compiler that turns the kernels into GPU code.
    Nvrtc,
    /// Matrix products.
    Cublas,
}

impl CudaLibrary {
    /// File names to try in a folder, newest CUDA first.
    fn file_names(self) -> &'static [&'static str] {
        match self {
            CudaLibrary::Driver => &["libcuda.so.1", "libcuda.so"],
            CudaLibrary::Nvrtc => &["libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"],
            CudaLibrary::Cublas => &[
                "libcublasLt.so.13",
                "libcublas.so.13",
                "libcublasLt.so.12",
                "libcublas.so.12",
                "libcublasLt.so",
                "libcublas.so",
            ],
        }
    }

    /// Whether cudarc's lookup by name now finds the library.
    fn present(self) -> bool {
        // Safety: these only try to open the library; nothing in it is called.
        unsafe {
            match self {
                CudaLibrary::Driver => cudarc::driver::sys::is_culib_present(),
                CudaLibrary::Nvrtc => cudarc::nvrtc::sys::is_culib_present(),
                CudaLibrary::Cublas => cudarc::cublas::sys::is_culib_present(),
            }
        }
    }
}

impl std::fmt::Display for CudaLibrary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            CudaLibrary::Driver => "the CUDA driver (libcuda.so.1)",
            CudaLibrary::Nvrtc => "NVRTC (libnvrtc.so.13 or .12)",
            CudaLibrary::Cublas => "cuBLAS (libcublas.so.13 or .12)",
        })
    }
}

/// Folders that hold CUDA libraries outside the linker's path on common installs.
fn toolkit_folders() -> Vec<PathBuf> {
    let mut folders = Vec::new();
    for variable in ["CUDA_HOME", "CUDA_PATH", "CUDA_ROOT"] {
        if let Some(root) = std::env::var_os(variable) {
            let root = PathBuf::from(root);
            folders.push(root.join("lib64"));
            folders.push(root.join("lib"));
        }
    }
    folders.push(PathBuf::from("/usr/local/cuda/lib64"));
    folders.push(PathBuf::from("/usr/local/cuda/targets/x86_64-linux/lib"));
    folders.push(PathBuf::from("/usr/lib/x86_64-linux-gnu"));
    folders
}

/// Loads `library` from a toolkit folder by full path and keeps it loaded; whether that worked.
fn preload(library: CudaLibrary) -> bool {
    let mut loaded = false;
    for folder in toolkit_folders() {
        for name in library.file_names() {
            let path = folder.join(name);
            if !path.exists() {
                continue;
            }
            // Safety: loading a CUDA library runs only its initialisers.
            if let Ok(handle) = unsafe { libloading::Library::new(&path) } {
                std::mem::forget(handle);
                loaded = true;
            }
        }
        if loaded {
            return true;
        }
    }
    false
}

/// Checks that `library` can be loaded, looking in the toolkit folders when the linker alone does
/// not find it. The answer is remembered for the life of the process.
pub fn require(library: CudaLibrary) -> Result<(), String> {
    static ANSWERS: [OnceLock<bool>; 3] = [OnceLock::new(), OnceLock::new(), OnceLock::new()];
    let slot = match library {
        CudaLibrary::Driver => &ANSWERS[0],
        CudaLibrary::Nvrtc => &ANSWERS[1],
        CudaLibrary::Cublas => &ANSWERS[2],
    };
    let found = *slot.get_or_init(|| library.present() || (preload(library) && library.present()));
    if found {
        Ok(())
    } else {
        Err(format!(
            "{library} was not found (searched the linker path and {})",
            toolkit_folders()
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ))
    }
}

/// Checks every library the backend needs and that a GPU is visible; the reason when not.
pub fn cuda_available() -> Result<(), String> {
    for library in [CudaLibrary::Driver, CudaLibrary::Nvrtc, CudaLibrary::Cublas] {
        require(library)?;
    }
    match cudarc::driver::CudaContext::device_count() {
        Ok(0) => Err("the CUDA driver sees no GPU".to_string()),
        Ok(_) => Ok(()),
        Err(e) => Err(format!("the CUDA driver did not start: {e}")),
    }
}
