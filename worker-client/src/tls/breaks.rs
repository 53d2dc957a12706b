//! Negative-control switches of the TLS path (`JQ_CLIENT_BREAK`, cargo feature `test-breaks`
//! only; always off without it). Each names the test in tests/tls.rs that must fail with it.

#[cfg(feature = "test-breaks")]
fn is(name: &str) -> bool {
    std::env::var("JQ_CLIENT_BREAK").is_ok_and(|v| v == name)
}

#[cfg(not(feature = "test-breaks"))]
fn is(_: &str) -> bool {
    false
}

/// `tls_no_tls`: every connection is plain, as before TLS support (tests that connect over
/// TLS fail: the server's `hostnossl … reject` line refuses them).
pub(crate) fn no_tls() -> bool {
    is("tls_no_tls")
}

/// `tls_no_hostname_check`: verify-full does not check the host name
/// (`wrong_ca_and_wrong_host_are_one_line_errors` fails: the wrong host connects).
pub(crate) fn no_hostname_check() -> bool {
    is("tls_no_hostname_check")
}

/// `tls_accept_any_cert`: no certificate is verified
/// (`wrong_ca_and_wrong_host_are_one_line_errors` fails: the wrong CA connects).
pub(crate) fn accept_any_cert() -> bool {
    is("tls_accept_any_cert")
}

/// `tls_cancel_no_tls`: the cancel request is sent without TLS, as before TLS support
/// (`a_job_flows_through_a_worker_over_verify_full` fails: the worker's waiting claim is not
/// cancelled, so SIGTERM takes the whole idle wait).
pub(crate) fn cancel_no_tls() -> bool {
    is("tls_cancel_no_tls")
}

/// `tls_prefer_no_fallback`: prefer does not retry plain after a failed TLS attempt
/// (`prefer_falls_back_to_plain_when_tls_is_refused` fails).
pub(crate) fn prefer_no_fallback() -> bool {
    is("tls_prefer_no_fallback")
}

/// `tls_ignore_url_sslmode`: the connection string's `sslmode` is taken out but not used
/// (PGSSLMODE or prefer instead): `disable_and_prefer_work_on_a_server_without_tls` and
/// `environment_variables_set_the_mode_and_root_certificate` fail.
pub(crate) fn ignore_url_sslmode() -> bool {
    is("tls_ignore_url_sslmode")
}

/// `no_connect_bound`: a connection attempt is bounded only as tokio-postgres bounds it (the
/// TCP connect alone), so a path that accepts and then says nothing holds it forever
/// (tests/half_open.rs `connecting_through_a_frozen_path_is_bounded` fails).
pub(crate) fn no_connect_bound() -> bool {
    is("no_connect_bound")
}
