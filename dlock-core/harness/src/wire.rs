//! Just enough of each server's wire protocol for readiness checks and smoke tests: RESP,
//! HTTP/1.1, ZooKeeper's four-letter words and PostgreSQL's startup handshake.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// The limit for one whole exchange (connect, request, reply) with a server.
pub(crate) const IO_TIMEOUT: Duration = Duration::from_secs(2);

/// Runs `fut` with [`IO_TIMEOUT`], turning a timeout into [`io::ErrorKind::TimedOut`].
async fn timed<T>(fut: impl Future<Output = io::Result<T>>) -> io::Result<T> {
    tokio::time::timeout(IO_TIMEOUT, fut)
        .await
        .unwrap_or_else(|_| {
            Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "server did not answer",
            ))
        })
}

async fn connect(port: u16) -> io::Result<TcpStream> {
    TcpStream::connect(("127.0.0.1", port)).await
}

// ---------------------------------------------------------------------------------------------
// RESP (Redis)

/// One RESP reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Resp {
    /// `+OK`
    Simple(String),
    /// `-ERR ...`
    Error(String),
    /// `:42`
    Integer(i64),
    /// `$3\r\nfoo`, or `$-1` (nil)
    Bulk(Option<Vec<u8>>),
    /// `*2 ...`, or `*-1` (nil)
    Array(Option<Vec<Self>>),
}

impl Resp {
    /// The reply as text, the way `redis-cli` prints it; a Redis error is `Err`.
    pub(crate) fn into_text(self) -> Result<String, String> {
        match self {
            Self::Simple(s) => Ok(s),
            Self::Error(e) => Err(e),
            Self::Integer(i) => Ok(i.to_string()),
            Self::Bulk(None) | Self::Array(None) => Ok("(nil)".to_owned()),
            Self::Bulk(Some(bytes)) => Ok(String::from_utf8_lossy(&bytes).into_owned()),
            Self::Array(Some(items)) => {
                let lines: Result<Vec<_>, _> = items.into_iter().map(Self::into_text).collect();
                Ok(lines?.join("\n"))
            }
        }
    }
}

/// Sends one command to the Redis server on `port` and reads its reply.
pub(crate) async fn resp_command(port: u16, args: &[&str]) -> io::Result<Resp> {
    timed(async {
        let mut stream = BufReader::new(connect(port).await?);
        stream.get_mut().write_all(&encode_command(args)).await?;
        read_resp(&mut stream).await
    })
    .await
}

/// Whether the Redis server on `port` answers `PING` with `+PONG`.
pub(crate) async fn redis_ping(port: u16) -> bool {
    matches!(resp_command(port, &["PING"]).await, Ok(Resp::Simple(s)) if s == "PONG")
}

fn encode_command(args: &[&str]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for arg in args {
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out
}

type BoxedRead<'a> = Pin<Box<dyn Future<Output = io::Result<Resp>> + Send + 'a>>;

fn read_resp<R: AsyncRead + Unpin + Send>(reader: &mut BufReader<R>) -> BoxedRead<'_> {
    Box::pin(async move {
        let line = read_line(reader).await?;
        let (kind, rest) = line.split_at(1);
        match kind {
            "+" => Ok(Resp::Simple(rest.to_owned())),
            "-" => Ok(Resp::Error(rest.to_owned())),
            ":" => Ok(Resp::Integer(parse_int(rest)?)),
            "$" => read_bulk(reader, parse_int(rest)?).await,
            "*" => read_array(reader, parse_int(rest)?).await,
            _ => Err(invalid(format!("unexpected RESP line {line:?}"))),
        }
    })
}

async fn read_bulk<R: AsyncRead + Unpin + Send>(
    reader: &mut BufReader<R>,
    len: i64,
) -> io::Result<Resp> {
    let Ok(len) = usize::try_from(len) else {
        return Ok(Resp::Bulk(None));
    };
    let mut buf = vec![0; len + 2];
    reader.read_exact(&mut buf).await?;
    buf.truncate(len);
    Ok(Resp::Bulk(Some(buf)))
}

async fn read_array<R: AsyncRead + Unpin + Send>(
    reader: &mut BufReader<R>,
    len: i64,
) -> io::Result<Resp> {
    let Ok(len) = usize::try_from(len) else {
        return Ok(Resp::Array(None));
    };
    let mut items = Vec::with_capacity(len);
    for _ in 0..len {
        items.push(read_resp(reader).await?);
    }
    Ok(Resp::Array(Some(items)))
}

async fn read_line<R: AsyncRead + Unpin>(reader: &mut BufReader<R>) -> io::Result<String> {
    let mut line = String::new();
    if reader.read_line(&mut line).await? == 0 {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "connection closed",
        ));
    }
    let line = line.trim_end_matches(['\r', '\n']);
    if line.is_empty() {
        return Err(invalid("empty RESP line".to_owned()));
    }
    Ok(line.to_owned())
}

fn parse_int(s: &str) -> io::Result<i64> {
    s.parse()
        .map_err(|_| invalid(format!("bad RESP integer {s:?}")))
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg)
}

// ---------------------------------------------------------------------------------------------
// HTTP/1.1 (etcd)

/// Sends one HTTP/1.1 request with `Connection: close` and returns the status code and body.
pub(crate) async fn http(
    port: u16,
    method: &str,
    path: &str,
    body: &str,
) -> io::Result<(u16, String)> {
    timed(async {
        let mut stream = connect(port).await?;
        let request = format!(
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        stream.write_all(request.as_bytes()).await?;
        let mut response = String::new();
        stream.read_to_string(&mut response).await?;
        parse_http_response(&response)
    })
    .await
}

fn parse_http_response(response: &str) -> io::Result<(u16, String)> {
    let (head, body) = response
        .split_once("\r\n\r\n")
        .ok_or_else(|| invalid("no HTTP header end".to_owned()))?;
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| invalid(format!("bad HTTP status line in {head:?}")))?;
    Ok((status, body.to_owned()))
}

/// The string value of the first `"key":"value"` in a JSON text (no nesting awareness).
pub(crate) fn json_string_field<'a>(json: &'a str, key: &str) -> Option<&'a str> {
    let start = json.find(&format!("\"{key}\":\""))? + key.len() + 4;
    let len = json[start..].find('"')?;
    Some(&json[start..start + len])
}

// ---------------------------------------------------------------------------------------------
// ZooKeeper four-letter words

/// Sends a four-letter word (`ruok`, `srvr`, ...) to the ZooKeeper server on `port`.
pub(crate) async fn four_letter_word(port: u16, word: &str) -> io::Result<String> {
    timed(async {
        let mut stream = connect(port).await?;
        stream.write_all(word.as_bytes()).await?;
        let mut reply = String::new();
        stream.read_to_string(&mut reply).await?;
        Ok(reply)
    })
    .await
}

// ---------------------------------------------------------------------------------------------
// PostgreSQL startup handshake

/// Whether the PostgreSQL server on `port` accepts a session for `user` on database `user`
/// (trust authentication: the first reply is `AuthenticationOk`).
pub(crate) async fn postgres_accepts(port: u16, user: &str) -> bool {
    let handshake = timed(async {
        let mut stream = connect(port).await?;
        stream.write_all(&startup_message(user)).await?;
        let kind = stream.read_u8().await?;
        let _len = stream.read_u32().await?;
        let auth = stream.read_u32().await?;
        stream.write_all(&[b'X', 0, 0, 0, 4]).await?; // Terminate
        Ok(kind == b'R' && auth == 0)
    });
    handshake.await.unwrap_or(false)
}

fn startup_message(user: &str) -> Vec<u8> {
    const PROTOCOL_3_0: u32 = 196_608;
    let mut body = PROTOCOL_3_0.to_be_bytes().to_vec();
    for (key, value) in [("user", user), ("database", user)] {
        for s in [key, value] {
            body.extend_from_slice(s.as_bytes());
            body.push(0);
        }
    }
    body.push(0);
    let len = u32::try_from(body.len() + 4).expect("startup message is tiny");
    let mut message = len.to_be_bytes().to_vec();
    message.extend(body);
    message
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_commands_as_resp_arrays() {
        assert_eq!(
            encode_command(&["SET", "k", "v1"]),
            b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$2\r\nv1\r\n"
        );
    }

    #[tokio::test]
    async fn parses_nested_resp_replies() {
        let bytes: &[u8] = b"*3\r\n+OK\r\n$-1\r\n*2\r\n:7\r\n$2\r\nhi\r\n";
        let reply = read_resp(&mut BufReader::new(bytes)).await.unwrap();
        assert_eq!(reply.into_text().unwrap(), "OK\n(nil)\n7\nhi");
    }

    #[test]
    fn finds_json_string_fields() {
        let json = r#"{"header":{"member_id":"123","raft_term":"4"},"leader":"123"}"#;
        assert_eq!(json_string_field(json, "member_id"), Some("123"));
        assert_eq!(json_string_field(json, "leader"), Some("123"));
        assert_eq!(json_string_field(json, "version"), None);
    }

    #[test]
    fn parses_http_responses() {
        let (status, body) =
            parse_http_response("HTTP/1.1 200 OK\r\nA: b\r\n\r\n{\"health\":\"true\"}").unwrap();
        assert_eq!((status, body.as_str()), (200, "{\"health\":\"true\"}"));
    }
}
