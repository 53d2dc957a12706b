//! Deliberately broken variants of the dashboard for the negative controls of the browser tests
//! (tests/dashboard_browser.rs), compiled only with the cargo feature `test-breaks` and chosen
//! with the environment variable `JQ_CLIENT_BREAK`. Without the feature every switch is a
//! constant `false` and the variable is not read.

/// `dashboard_actions_noop`: the POST actions answer their 303 without calling jq. The browser
/// tests of retry, bulk retry and pause must fail with it.
pub fn actions_noop() -> bool {
    on("dashboard_actions_noop")
}

/// `dashboard_unescaped`: the job page writes the payload into the HTML unescaped. The browser
/// test of a `<script>` payload must fail with it.
pub fn unescaped() -> bool {
    on("dashboard_unescaped")
}

fn on(name: &str) -> bool {
    cfg!(feature = "test-breaks") && std::env::var("JQ_CLIENT_BREAK").is_ok_and(|v| v == name)
}
