//! The Kubernetes manifests in `deploy/`: every overlay builds with `kubectl kustomize`, its
//! built-in kinds validate strictly with kubernetes-validate, the checks the schemas cannot make
//! pass (deploy/check.py), and each overlay's route config is one the gateway accepts.

use std::path::PathBuf;
use std::process::Command;
use switchyard_gateway::front::routes::RouteTable;
use switchyard_tests::python_has;

fn kubectl_present() -> bool {
    Command::new("kubectl")
        .args(["version", "--client"])
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn every_overlay_builds_validates_and_routes_parse() {
    if !kubectl_present() || !python_has("kubernetes_validate") {
        assert!(
            std::env::var_os("SWITCHYARD_REQUIRE_KUBECTL").is_none(),
            "SWITCHYARD_REQUIRE_KUBECTL is set but kubectl or kubernetes-validate is missing"
        );
        eprintln!("skipped: needs kubectl and `pip install kubernetes-validate`");
        return;
    }
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let out = std::env::temp_dir().join(format!("switchyard-deploy-{}", std::process::id()));
    std::fs::create_dir_all(&out).unwrap();
    let run = Command::new("python3")
        .arg(root.join("deploy/check.py"))
        .arg(&out)
        .output()
        .expect("python3 runs");
    let report = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "{report}{}",
        String::from_utf8_lossy(&run.stderr)
    );
    for (overlay, pool) in [
        ("sim", "qwen3-0.6b"),
        ("pd", "qwen3-0.6b"),
        ("autoscaling", "qwen3-0.6b"),
        ("pd-autoscaling", "qwen3-0.6b"),
        ("traffic-splitting", "qwen3-0.6b"),
        ("traffic-mirror", "qwen3-0.6b"),
        ("gpu", "qwen3-8b"),
        ("vllm", "qwen3-8b"),
    ] {
        let text = std::fs::read_to_string(out.join(format!("{overlay}.json")))
            .unwrap_or_else(|e| panic!("{overlay}: no route config written: {e}"));
        RouteTable::parse(&text, vec![pool.to_string()], |_| Some("key".to_string()))
            .unwrap_or_else(|e| panic!("{overlay}: the gateway refuses its route config: {e}"));
    }
    std::fs::remove_dir_all(&out).unwrap();
}
