//! The caps in force, written down: the JSON the daemon keeps in its database row (at takeover
//! and after each reload) and that `fleet status` shows when no daemon is running.
//!
//! One function so that the daemon and `fleet status` can never describe the same config in two
//! different shapes. It must never decide anything: the caps themselves come from
//! [`Config::caps`].

use config::Config;

/// The caps of `config` as a JSON object:
/// `{"global": N, "namespaces": {"NAME": {"max_concurrency": N, "weight": W}, …}, "host":
/// {"name": "NAME", "max_concurrency": N}}` (`namespaces` is empty when the config declares
/// none; the host's `max_concurrency` is null when no `[hosts.NAME]` table caps it).
pub fn caps_json(config: &Config) -> String {
    let caps = config.caps();
    let namespaces: serde_json::Map<String, serde_json::Value> = caps
        .namespaces
        .iter()
        .map(|(name, cap)| {
            (
                name.clone(),
                serde_json::json!({"max_concurrency": cap.max_concurrency, "weight": cap.weight}),
            )
        })
        .collect();
    let host = serde_json::json!({
        "name": config.host,
        "max_concurrency": config.host_capacity(&config.host),
    });
    serde_json::json!({"global": caps.global, "namespaces": namespaces, "host": host}).to_string()
}
