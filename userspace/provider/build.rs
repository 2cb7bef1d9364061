//! Generates the provider's bindings to rdma-core's provider interface
//! (`libibverbs/driver.h`, internal to rdma-core, hence taken from the source
//! of the exact rdma-core installed) and to ferroce's ABI header.
//!
//! Inputs (environment): RDMA_CORE_SRC (rdma-core source tree),
//! IBVERBS_PABI_VERSION (the provider ABI of that rdma-core),
//! FERROCE_ABI_VERSION_OVERRIDE (tests only: pretend another uverbs ABI).
use std::env;
use std::fs;
use std::path::PathBuf;
use std::process::Command;

fn main() {
    let src = PathBuf::from(env::var("RDMA_CORE_SRC").expect(
        "RDMA_CORE_SRC must name the rdma-core source tree (tools/sysroot unpacks it); build with `tools/build provider`",
    ));
    let pabi = env::var("IBVERBS_PABI_VERSION").expect("IBVERBS_PABI_VERSION must be set (see userspace/Makefile)");
    let out = PathBuf::from(env::var("OUT_DIR").unwrap());
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap());
    let abi_header = manifest.join("../../include/uapi/rdma/ferroce-abi.h");
    for v in ["RDMA_CORE_SRC", "IBVERBS_PABI_VERSION", "FERROCE_ABI_VERSION_OVERRIDE"] {
        println!("cargo:rerun-if-env-changed={v}");
    }
    println!("cargo:rerun-if-changed={}", abi_header.display());
    println!("cargo:rerun-if-changed=build.rs");

    // rdma-core's headers expect its build tree's layout: infiniband/*.h,
    // generated kernel-abi/*.h and a config.h.
    let inc = out.join("include");
    let _ = fs::remove_dir_all(&inc);
    fs::create_dir_all(inc.join("infiniband")).unwrap();
    fs::create_dir_all(inc.join("kernel-abi")).unwrap();
    for entry in fs::read_dir(src.join("libibverbs")).unwrap() {
        let p = entry.unwrap().path();
        if p.extension().is_some_and(|e| e == "h") {
            fs::copy(&p, inc.join("infiniband").join(p.file_name().unwrap())).unwrap();
        }
    }
    for h in ["ib_user_verbs.h", "ib_user_ioctl_verbs.h", "rdma_user_ioctl_cmds.h"] {
        let status = Command::new("python3")
            .arg(src.join("buildlib/make_abi_structs.py"))
            .arg(src.join("kernel-headers/rdma").join(h))
            .arg(inc.join("kernel-abi").join(h))
            .status()
            .expect("python3 is needed to run rdma-core's make_abi_structs.py");
        assert!(status.success(), "make_abi_structs.py failed on {h}");
    }
    fs::write(
        inc.join("config.h"),
        format!(
            "#define HAVE_STATEMENT_EXPR 1\n#define HAVE_BUILTIN_TYPES_COMPATIBLE_P 1\n#define HAVE_TYPEOF 1\n\
             #define HAVE_FUNC_ATTRIBUTE_ALWAYS_INLINE 1\n#define IBVERBS_PABI_VERSION {pabi}\n\
             #define VERBS_IOCTL_ONLY 0\n#define VERBS_WRITE_ONLY 0\n#define SIZEOF_LONG 8\n\
             #define RDMA_CDEV_DIR \"/dev/infiniband\"\n"
        ),
    )
    .unwrap();
    fs::write(
        inc.join("ferroce_provider.h"),
        format!(
            "#include <infiniband/driver.h>\n#include \"{}\"\n",
            abi_header.display()
        ),
    )
    .unwrap();

    let bindings = out.join("verbs.rs");
    let status = Command::new("bindgen")
        .arg(inc.join("ferroce_provider.h"))
        .args(["--use-core", "--no-doc-comments", "--no-prepend-enum-name"])
        .args(["--allowlist-function", "(ibv|_?verbs|ibv_cmd)_.*"])
        .args(["--allowlist-type", "(ibv|verbs|ib_uverbs|ferroce)_.*"])
        .args(["--allowlist-var", "(IBV|VERBS|FERROCE|IB_USER_VERBS)_.*"])
        .arg("-o")
        .arg(&bindings)
        .arg("--")
        .arg(format!("-I{}", inc.display()))
        .arg(format!("-I{}", src.display()))
        .arg(format!("-I{}", src.join("kernel-headers").display()))
        .status()
        .expect("bindgen (Debian package bindgen) is needed to build the provider");
    assert!(status.success(), "bindgen over rdma-core's driver.h failed");

    let abi = match env::var("FERROCE_ABI_VERSION_OVERRIDE") {
        Ok(v) => v,
        Err(_) => String::from("FERROCE_UVERBS_ABI_VERSION"),
    };
    fs::write(
        out.join("abi.rs"),
        format!("/// The uverbs ABI version this provider speaks.\npub const PROVIDER_ABI_VERSION: u32 = {abi} as u32;\n"),
    )
    .unwrap();
    // verbs_register_driver_<PABI>: the symbol name carries the provider ABI.
    fs::write(
        out.join("register.rs"),
        format!("verbs_register_driver_{pabi}\n"),
    )
    .unwrap();
    println!("cargo:rustc-link-lib=dylib=ibverbs");
}
