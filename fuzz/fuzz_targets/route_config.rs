//! A route config file (`--route-config`): any text must parse into a table whose plans work,
//! or be refused with an error, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use switchyard_gateway::front::routes::RouteTable;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let pool = vec!["m".to_string(), "chat".to_string()];
    let Ok(table) = RouteTable::parse(text, pool, |_| Some("sk-env".into())) else {
        return;
    };
    let mut draws = [0.0, 0.5, 0.999_999].into_iter().cycle();
    for name in table
        .model_names()
        .iter()
        .map(String::as_str)
        .chain(["m", "gpt-4o", "", "*"])
    {
        if let Ok(plan) = table.plan(Some(name), || draws.next().unwrap_or(0.0)) {
            assert!(!plan.attempts.is_empty());
        }
    }
    let _ = table.plan(None, || 0.0);
    let _ = table.labels();
});
