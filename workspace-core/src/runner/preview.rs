//! Preview endpoints: the run's published ports as the process boundary bound
//! them, and the contract's preview check, recorded in `preview.json`.

use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::error::RunErrorKind;
use super::http::get_status;
use super::observed::ObservedRecord;
use super::paths::RunPaths;
use super::state_files::read_state;
use crate::boundary::PreviewEndpoint;
use crate::clock::unix_ms_now;
use crate::contract::HttpCheck;

/// How long the preview check waits for an answer.
const CHECK_TIMEOUT: Duration = Duration::from_secs(10);

/// `preview.json`: the endpoints and what the declared check got.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PreviewRecord {
    /// Each published port and the host address that forwards to it.
    pub endpoints: Vec<PreviewEndpoint>,
    /// The declared preview check, if any, run when the run drained.
    pub check: Option<PreviewCheckRecord>,
}

/// What the preview check got.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PreviewCheckRecord {
    /// The URL requested (on the host).
    pub url: String,
    /// The status the contract expects.
    pub expected: u16,
    /// The status that came back, if an HTTP answer did.
    pub status: Option<u16>,
    /// Why there was no answer.
    pub error: Option<String>,
    /// Whether the answer was the expected one.
    pub passed: bool,
    /// When it was asked, in milliseconds since the Unix epoch.
    pub at_unix_ms: u64,
}

/// The preview endpoints the seal observed (in `observed.json` of the evidence
/// at `observed`); none before the run was sealed.
pub(super) fn endpoints(observed: &Path) -> Result<Vec<PreviewEndpoint>, RunErrorKind> {
    let record: Option<ObservedRecord> = read_state(observed)?;
    Ok(record.map(|r| r.probe.previews).unwrap_or_default())
}

impl RunPaths {
    /// The run's preview endpoints, as its seal bound them (`observed.json`);
    /// none before it was sealed.
    pub fn previews(&self) -> Result<Vec<PreviewEndpoint>, RunErrorKind> {
        endpoints(
            &self
                .evidence
                .join(crate::evidence::EvidenceFile::Observed.file_name()),
        )
    }
}

/// Requests the check's path through its port's endpoint, as a user's browser
/// on the host would.
pub(super) async fn check(endpoints: &[PreviewEndpoint], check: &HttpCheck) -> PreviewCheckRecord {
    let endpoint = endpoints.iter().find(|e| e.port == check.port);
    let url = endpoint.map_or_else(
        || format!("(port {} is not published)", check.port),
        |e| format!("http://{}{}", e.host, check.path),
    );
    let answer = match endpoint {
        None => Err("the port has no preview endpoint".to_owned()),
        Some(endpoint) => {
            let asked = async {
                let stream = tokio::net::TcpStream::connect(endpoint.host)
                    .await
                    .map_err(|e| format!("connecting to {}: {e}", endpoint.host))?;
                get_status(stream, &check.path).await
            };
            tokio::time::timeout(CHECK_TIMEOUT, asked)
                .await
                .unwrap_or_else(|_| Err(format!("no answer within {} s", CHECK_TIMEOUT.as_secs())))
        }
    };
    let (status, error) = match answer {
        Ok(status) => (Some(status), None),
        Err(error) => (None, Some(error)),
    };
    PreviewCheckRecord {
        url,
        expected: check.status,
        passed: status == Some(check.status),
        status,
        error,
        at_unix_ms: unix_ms_now(),
    }
}
