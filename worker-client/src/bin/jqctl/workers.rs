//! `jqctl workers`: the worker fleet (jq.fleet), one line per registered worker the role may
//! see (listings::workers; `--json`, `--wide` as every listing).

use crate::{connect, listings, table, Cli, CliError, CliResult};

/// `jqctl workers`: prints the fleet, or says that this jq has no worker registry.
pub async fn workers(cli: &Cli, fmt: table::Format) -> CliResult {
    let client = connect(cli).await?;
    let exists: bool = client.query_typed_one("SELECT to_regclass('jq.fleet') IS NOT NULL", &[]).await?.get(0);
    if !exists {
        return Err(CliError(
            "this jq has no worker registry (view jq.fleet does not exist); install a jq version with it".into(),
        ));
    }
    listings::workers().print(&client, fmt).await
}
