//! The loopback side of the front: HTTP/1.1 requests as libtiledb's S3 client sends them
//! (a request line, headers, no body for a read), and the answers written back, on a
//! connection kept alive between requests.

use std::io::{self, BufRead, Read, Write};

/// A request's parts, its target split into a decoded path and decoded parameters.
#[derive(Debug)]
pub struct Request {
    pub method: String,
    /// The decoded path: `/bucket/key`.
    pub path: String,
    pub query: Vec<(String, String)>,
    /// The path and the query as the request line carries them (percent-encoded).
    pub raw_path: String,
    pub raw_query: String,
    pub headers: Vec<(String, String)>,
    /// Whether the client asked for the connection to close after the answer.
    pub closes: bool,
}

/// The value of header `name` (any case) among `headers`.
pub fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

/// The value of query parameter `name` among `query`.
pub fn param<'a>(query: &'a [(String, String)], name: &str) -> Option<&'a str> {
    query
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
}

impl Request {
    /// The value of header `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        header(&self.headers, name)
    }

    /// The query parameter `name`'s value.
    pub fn param(&self, name: &str) -> Option<&str> {
        param(&self.query, name)
    }
}

/// The longest request head read: libtiledb's are under 2 KiB.
pub const MOST_HEAD_BYTES: usize = 64 << 10;

/// The next request on a connection, `None` once the client closed it. A request's body (a
/// read sends none) is read and dropped, so the next request starts where it should.
pub fn read_request(reader: &mut impl BufRead) -> io::Result<Option<Request>> {
    let mut head = Vec::new();
    loop {
        let before = head.len();
        let n = reader
            .take((MOST_HEAD_BYTES - before) as u64)
            .read_until(b'\n', &mut head)?;
        if n == 0 {
            if head.is_empty() {
                return Ok(None);
            }
            return Err(bad("the request ended in its head"));
        }
        if head.len() >= MOST_HEAD_BYTES {
            return Err(bad("a request head of more than 64 KiB"));
        }
        if head_ends_at(&head).is_some() {
            break;
        }
    }
    let request = parse_head(&head)?;
    io::copy(&mut reader.take(request.content_length()?), &mut io::sink())?;
    Ok(Some(request))
}

/// Where the request head at the start of `bytes` ends (just past its empty line), once it
/// is all there.
pub fn head_ends_at(bytes: &[u8]) -> Option<usize> {
    let mut line_start = 0;
    for (i, &byte) in bytes.iter().enumerate() {
        if byte == b'\n' {
            let line = &bytes[line_start..=i];
            if (line == b"\r\n" || line == b"\n") && line_start > 0 {
                return Some(i + 1);
            }
            line_start = i + 1;
        }
    }
    None
}

/// A request from its head: the request line and the headers, through the empty line.
pub fn parse_head(head: &[u8]) -> io::Result<Request> {
    let text = std::str::from_utf8(head).map_err(|_| bad("a request head not in UTF-8"))?;
    let mut lines = text.lines();
    let mut request_line = lines.next().unwrap_or_default().split(' ');
    let (Some(method), Some(target), Some(version)) = (
        request_line.next(),
        request_line.next(),
        request_line.next(),
    ) else {
        return Err(bad("a malformed request line"));
    };
    let mut headers = Vec::new();
    for line in lines.filter(|l| !l.is_empty()) {
        let (name, value) = line
            .split_once(':')
            .ok_or_else(|| bad("a malformed header"))?;
        headers.push((name.trim().to_owned(), value.trim().to_owned()));
    }
    let (raw_path, raw_query) = split_target(target);
    let mut request = Request {
        method: method.to_owned(),
        path: decode(raw_path)?,
        query: decode_query(raw_query)?,
        raw_path: raw_path.to_owned(),
        raw_query: raw_query.to_owned(),
        headers,
        closes: version == "HTTP/1.0",
    };
    if let Some(connection) = request.header("connection") {
        request.closes = connection.eq_ignore_ascii_case("close");
    }
    Ok(request)
}

impl Request {
    /// The length of the body that follows the head (a chunked body is refused).
    pub fn content_length(&self) -> io::Result<u64> {
        if self.header("transfer-encoding").is_some() {
            return Err(bad("a request body of chunks"));
        }
        match self.header("content-length") {
            Some(n) => n.parse().map_err(|_| bad("a malformed Content-Length")),
            None => Ok(0),
        }
    }
}

/// A target (`/bucket/key?name=value&...`, or the absolute form a proxy is sent) as its
/// path and query, still encoded.
fn split_target(target: &str) -> (&str, &str) {
    let target = match target.split_once("://") {
        Some((_, rest)) => &rest[rest.find('/').unwrap_or(rest.len())..],
        None => target,
    };
    target.split_once('?').unwrap_or((target, ""))
}

/// A query's parameters, decoded.
fn decode_query(query: &str) -> io::Result<Vec<(String, String)>> {
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (name, value) = p.split_once('=').unwrap_or((p, ""));
            Ok((decode(name)?, decode(value)?))
        })
        .collect()
}

/// Percent-decoding (a `+` is itself, as S3 reads paths).
fn decode(text: &str) -> io::Result<String> {
    percent_decode(text, false).ok_or_else(|| bad("a malformed percent-encoding, or not UTF-8"))
}

/// Percent-decoded `text` (a `+` a space where `plus_is_space`, as in S3's URL-encoded
/// listings); `None` where it is malformed or not UTF-8.
pub fn percent_decode(text: &str, plus_is_space: bool) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                out.push(u8::from_str_radix(text.get(i + 1..i + 3)?, 16).ok()?);
                i += 3;
            }
            b'+' if plus_is_space => {
                out.push(b' ');
                i += 1;
            }
            byte => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

fn bad(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_owned())
}

/// Writes an answer's status line and headers, with `Content-Length: length`. For a `HEAD`
/// the length is the object's, and no body follows.
pub fn write_head(
    out: &mut (impl Write + ?Sized),
    status: u16,
    headers: &[(String, String)],
    length: u64,
) -> io::Result<()> {
    let mut head = format!("HTTP/1.1 {status} {}\r\n", reason(status));
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str(&format!("Content-Length: {length}\r\n\r\n"));
    out.write_all(head.as_bytes())
}

/// A whole answer: head and body (none for a `HEAD`, whose length is still the body's).
pub fn write_answer(
    out: &mut (impl Write + ?Sized),
    method: &str,
    status: u16,
    headers: &[(String, String)],
    body: &[u8],
) -> io::Result<()> {
    write_head(out, status, headers, body.len() as u64)?;
    if method != "HEAD" {
        out.write_all(body)?;
    }
    out.flush()
}

/// An S3 error answer, as S3 words one: XML naming the code, and a message.
pub fn write_error(
    out: &mut (impl Write + ?Sized),
    method: &str,
    status: u16,
    code: &str,
    message: &str,
) -> io::Result<()> {
    let body = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>{code}</Code><Message>{}</Message></Error>",
        xml_escape(message)
    );
    let headers = [("Content-Type".to_owned(), "application/xml".to_owned())];
    write_answer(out, method, status, &headers, body.as_bytes())
}

pub fn xml_escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        206 => "Partial Content",
        304 => "Not Modified",
        400 => "Bad Request",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        416 => "Range Not Satisfiable",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        _ => "Status",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_read_one_after_another_on_a_connection() {
        let wire = "GET /bucket/a%20key/__meta/x?list-type=2&prefix=a%2Fb%2F HTTP/1.1\r\n\
                    Host: 127.0.0.1:9\r\nRange: bytes=0-9\r\n\r\n\
                    PUT /bucket/k HTTP/1.1\r\nContent-Length: 3\r\nConnection: close\r\n\r\nabc\
                    HEAD http://127.0.0.1:9/bucket/k HTTP/1.1\r\n\r\n";
        let mut reader = io::BufReader::new(wire.as_bytes());
        let first = read_request(&mut reader).unwrap().unwrap();
        assert_eq!(first.method, "GET");
        assert_eq!(first.path, "/bucket/a key/__meta/x");
        assert_eq!(first.param("prefix"), Some("a/b/"));
        assert_eq!(first.param("list-type"), Some("2"));
        assert_eq!(first.header("range"), Some("bytes=0-9"));
        assert!(!first.closes);
        let second = read_request(&mut reader).unwrap().unwrap();
        assert_eq!((second.method.as_str(), second.closes), ("PUT", true));
        let third = read_request(&mut reader).unwrap().unwrap();
        assert_eq!(
            (third.method.as_str(), third.path.as_str()),
            ("HEAD", "/bucket/k")
        );
        assert!(read_request(&mut reader).unwrap().is_none());
    }

    #[test]
    fn malformed_requests_are_errors() {
        for wire in [
            "GET\r\n\r\n",
            "GET /%zz HTTP/1.1\r\n\r\n",
            "GET / HTTP/1.1\r\nno colon\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: x",
        ] {
            let mut reader = io::BufReader::new(wire.as_bytes());
            assert!(read_request(&mut reader).is_err(), "{wire:?}");
        }
    }
}
