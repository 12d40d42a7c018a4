//! The one HTTP request the runner makes: `GET` a path, read the status.

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Sends `GET path` on `stream` and reads the status code of the answer.
pub(super) async fn get_status(
    mut stream: tokio::net::TcpStream,
    path: &str,
) -> Result<u16, String> {
    let request = format!("GET {path} HTTP/1.0\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    stream
        .write_all(request.as_bytes())
        .await
        .map_err(|e| format!("sending the request: {e}"))?;
    let mut head = Vec::new();
    let mut buffer = [0u8; 256];
    while !head.contains(&b'\n') && head.len() < 4096 {
        let read = stream
            .read(&mut buffer)
            .await
            .map_err(|e| format!("reading the answer: {e}"))?;
        if read == 0 {
            break;
        }
        head.extend_from_slice(&buffer[..read]);
    }
    let line = String::from_utf8_lossy(&head);
    let line = line.lines().next().unwrap_or_default();
    let mut parts = line.split_whitespace();
    match (parts.next(), parts.next().map(str::parse::<u16>)) {
        (Some(version), Some(Ok(status))) if version.starts_with("HTTP/") => Ok(status),
        _ => Err(format!("not an HTTP answer: {line:?}")),
    }
}
