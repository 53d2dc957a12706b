//! The TLS parameters of a connection string that tokio-postgres' `Config` cannot hold
//! (`sslmode=verify-ca|verify-full`, `sslrootcert`): taken out of the string before the rest is
//! parsed by tokio-postgres, in both forms libpq accepts (a `postgresql://` URL's query, or
//! `key=value` pairs). Unit tests at the bottom; the connections themselves are checked by
//! tests/tls.rs.

use percent_encoding::percent_decode_str;

use crate::Error;

/// The keys this module takes out of a connection string.
const KEYS: [&str; 2] = ["sslmode", "sslrootcert"];

/// A connection string without its TLS keys, and their values.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Extracted {
    /// The string without `sslmode` and `sslrootcert`, for tokio-postgres to parse.
    pub rest: String,
    pub sslmode: Option<String>,
    pub sslrootcert: Option<String>,
}

impl Extracted {
    fn set(&mut self, key: &str, value: String) {
        match key {
            "sslmode" => self.sslmode = Some(value),
            _ => self.sslrootcert = Some(value),
        }
    }
}

/// Splits `conninfo` (URL or `key=value` form) into the part tokio-postgres parses and the
/// TLS values; a later occurrence of a key wins, as in libpq.
pub(crate) fn extract(conninfo: &str) -> Result<Extracted, Error> {
    if conninfo.starts_with("postgres://") || conninfo.starts_with("postgresql://") {
        extract_url(conninfo)
    } else {
        extract_key_values(conninfo)
    }
}

/// URL form: `sslmode` and `sslrootcert` are query parameters, percent-encoded.
fn extract_url(url: &str) -> Result<Extracted, Error> {
    let Some((base, query)) = url.split_once('?') else {
        return Ok(Extracted { rest: url.to_owned(), ..Extracted::default() });
    };
    let mut out = Extracted::default();
    let mut kept = Vec::new();
    for part in query.split('&') {
        let (k, v) = part.split_once('=').unwrap_or((part, ""));
        let key = decode(k)?;
        if KEYS.contains(&key.as_str()) {
            out.set(&key, decode(v)?);
        } else {
            kept.push(part);
        }
    }
    out.rest = if kept.is_empty() { base.to_owned() } else { format!("{base}?{}", kept.join("&")) };
    Ok(out)
}

fn decode(s: &str) -> Result<String, Error> {
    percent_decode_str(s)
        .decode_utf8()
        .map(|c| c.into_owned())
        .map_err(|_| Error::Config(format!("invalid database URL: {s:?} is not UTF-8 once percent-decoded")))
}

/// `key=value` form, with libpq's quoting: a value is a run of non-blank characters or is
/// single-quoted, and `\` escapes the next character in both.
fn extract_key_values(s: &str) -> Result<Extracted, Error> {
    let mut out = Extracted::default();
    let mut kept: Vec<&str> = Vec::new();
    let mut chars = s.char_indices().peekable();
    let blank = |c: char| c.is_ascii_whitespace();
    loop {
        while chars.next_if(|&(_, c)| blank(c)).is_some() {}
        let Some(&(start, _)) = chars.peek() else { break };
        let mut key = String::new();
        while let Some((_, c)) = chars.next_if(|&(_, c)| c != '=' && !blank(c)) {
            key.push(c);
        }
        while chars.next_if(|&(_, c)| blank(c)).is_some() {}
        if chars.next_if(|&(_, c)| c == '=').is_none() {
            return Err(Error::Config(format!("invalid database URL: missing \"=\" after \"{key}\"")));
        }
        while chars.next_if(|&(_, c)| blank(c)).is_some() {}
        let value = read_value(&mut chars, &key)?;
        let end = chars.peek().map_or(s.len(), |&(i, _)| i);
        if KEYS.contains(&key.as_str()) {
            out.set(&key, value);
        } else {
            kept.push(&s[start..end]);
        }
    }
    out.rest = kept.join(" ");
    Ok(out)
}

/// One value, quoted or not, unescaped.
fn read_value(chars: &mut std::iter::Peekable<std::str::CharIndices<'_>>, key: &str) -> Result<String, Error> {
    let mut value = String::new();
    let quoted = chars.next_if(|&(_, c)| c == '\'').is_some();
    loop {
        match chars.peek().map(|&(_, c)| c) {
            None if quoted => {
                return Err(Error::Config(format!("invalid database URL: unterminated quoted value of \"{key}\"")))
            }
            None => return Ok(value),
            Some(c) if !quoted && c.is_ascii_whitespace() => return Ok(value),
            Some('\'') if quoted => {
                chars.next();
                return Ok(value);
            }
            Some('\\') => {
                chars.next();
                if let Some((_, c)) = chars.next() {
                    value.push(c);
                }
            }
            Some(c) => {
                chars.next();
                value.push(c);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ex(s: &str) -> (String, Option<String>, Option<String>) {
        let e = extract(s).unwrap();
        (e.rest, e.sslmode, e.sslrootcert)
    }

    /// Seen failing with the values kept percent-encoded (`v.to_owned()` for `decode(v)?`).
    #[test]
    fn url_query_keys_are_taken_out_and_decoded() {
        assert_eq!(
            ex("postgresql://u@h:5/db?sslmode=verify-full&application_name=a&sslrootcert=%2Ftmp%2Fmy%20ca.pem"),
            ("postgresql://u@h:5/db?application_name=a".into(), Some("verify-full".into()), Some("/tmp/my ca.pem".into()))
        );
        assert_eq!(ex("postgres://h/db?sslmode=require"), ("postgres://h/db".into(), Some("require".into()), None));
        assert_eq!(ex("postgres://h/db"), ("postgres://h/db".into(), None, None));
    }

    /// Seen failing with `\` escapes ignored (`missing "=" after "b\'.pem'"`).
    #[test]
    fn key_value_pairs_are_taken_out_with_quoting() {
        assert_eq!(
            ex("host=h sslmode = verify-ca  sslrootcert='/tmp/a \\'b\\'.pem' dbname=x"),
            ("host=h dbname=x".into(), Some("verify-ca".into()), Some("/tmp/a 'b'.pem".into()))
        );
        assert_eq!(ex("password='a b' sslmode=disable"), ("password='a b'".into(), Some("disable".into()), None));
        assert_eq!(ex("sslrootcert=c\\ d.pem"), (String::new(), None, Some("c d.pem".into())));
    }

    /// Seen failing with an unterminated quote accepted as the end of the value.
    #[test]
    fn malformed_key_values_are_one_line_errors() {
        let e = extract("host=h sslrootcert='/tmp/x").unwrap_err().to_string();
        assert!(e.contains("unterminated quoted value of \"sslrootcert\""), "{e}");
        let e = extract("host").unwrap_err().to_string();
        assert!(e.contains("missing \"=\" after \"host\""), "{e}");
    }
}
