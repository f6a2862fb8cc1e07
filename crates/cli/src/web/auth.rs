//! Who may use the web approver, decided on every request before any handler runs.
//!
//! - **Host** must name this server (`127.0.0.1:PORT`, `localhost:PORT`, `[::1]:PORT`):
//!   a page of another site whose name was re-pointed at 127.0.0.1 (DNS rebinding)
//!   sends its own name and is refused.
//! - **Origin**, when sent, must be this server's; a mutation must send one (browsers
//!   do), and `Sec-Fetch-Site`, when sent, must say `same-origin`.
//! - **Login**: a one-time link printed at start creates the only session; its cookie
//!   is HttpOnly and SameSite=Strict. Every other tab of that browser shares it.
//! - **A secret path**: the page and its API live under `/s/<random>/`, and the cookie's
//!   `Path` is that prefix. Cookies are not isolated by port, so without it the browser
//!   would also send the session cookie to any other server on 127.0.0.1 it visits —
//!   another user's, say — which could then act as the operator.
//! - **CSRF**: every mutation carries the session's token in `X-Warden-CSRF` (the page
//!   gets it inside its own HTML) and a JSON body, which no cross-origin form can send.
//!
//! Secrets are 256-bit, from the OS CSPRNG, and compared in constant time.

use std::net::SocketAddr;
use std::sync::Mutex;

use approvals::Randomness;
use axum::body::Body;
use axum::extract::State;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use http::{HeaderMap, HeaderValue, Method, Request, StatusCode, header};
use subtle::ConstantTimeEq as _;

use super::App;

/// The session cookie's name.
pub const COOKIE: &str = "warden_console";
/// The header that carries the CSRF token.
pub const CSRF_HEADER: &str = "x-warden-csrf";

struct Secrets {
    /// The login link's secret until it is used.
    login: Option<String>,
    /// The session id and its CSRF token, once logged in.
    session: Option<(String, String)>,
}

/// The server's names and secrets.
pub struct Auth {
    prefix: String,
    hosts: Vec<String>,
    origins: Vec<String>,
    secrets: Mutex<Secrets>,
    random: approvals::OsRandom,
}

fn secret(random: &dyn Randomness) -> anyhow::Result<String> {
    let mut bytes = [0u8; 32];
    random
        .fill(&mut bytes)
        .map_err(|e| anyhow::anyhow!("cannot generate a secret: {e}"))?;
    Ok(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes))
}

fn same(a: &str, b: &str) -> bool {
    a.len() == b.len() && bool::from(a.as_bytes().ct_eq(b.as_bytes()))
}

impl Auth {
    /// The rules for a server at `addr`, and the one-time login secret.
    pub fn new(addr: SocketAddr, random: &dyn Randomness) -> anyhow::Result<(Auth, String)> {
        let port = addr.port();
        let mut hosts = vec![addr.to_string(), format!("localhost:{port}")];
        if addr.ip().is_ipv4() {
            hosts.push(format!("[::1]:{port}"));
        } else {
            hosts.push(format!("127.0.0.1:{port}"));
        }
        let origins = hosts.iter().map(|h| format!("http://{h}")).collect();
        let login = secret(random)?;
        let prefix = format!("/s/{}", secret(random)?);
        Ok((
            Auth {
                prefix,
                hosts,
                origins,
                secrets: Mutex::new(Secrets {
                    login: Some(login.clone()),
                    session: None,
                }),
                random: approvals::OsRandom,
            },
            login,
        ))
    }

    /// The secret path the page and its API live under (no trailing `/`).
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    fn secrets(&self) -> std::sync::MutexGuard<'_, Secrets> {
        self.secrets.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Trade the login secret for a session: `(cookie value, csrf)`. The link works once.
    pub fn login(&self, offered: &str) -> Result<String, &'static str> {
        let mut secrets = self.secrets();
        match &secrets.login {
            Some(login) if same(login, offered) => {}
            Some(_) => return Err("this login link is not valid"),
            None => {
                return Err(
                    "this login link has been used already: each link works once; restart `warden approvals ui --web` for a new one",
                );
            }
        }
        let (Ok(session), Ok(csrf)) = (secret(&self.random), secret(&self.random)) else {
            return Err("cannot generate a session");
        };
        secrets.login = None;
        secrets.session = Some((session.clone(), csrf));
        Ok(session)
    }

    /// The CSRF token of the session whose cookie `headers` carry.
    pub fn csrf_for(&self, headers: &HeaderMap) -> Option<String> {
        let offered = cookie(headers, COOKIE)?;
        let secrets = self.secrets();
        let (session, csrf) = secrets.session.as_ref()?;
        same(session, &offered).then(|| csrf.clone())
    }

    /// Why `request` may not go on, if it may not.
    fn refuse(&self, method: &Method, headers: &HeaderMap) -> Option<(StatusCode, String)> {
        let host = headers
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .unwrap_or("");
        if !self.hosts.iter().any(|h| h.eq_ignore_ascii_case(host)) {
            return Some((
                StatusCode::MISDIRECTED_REQUEST,
                format!(
                    "refused: Host {host:?} is not this approver (it answers only to http://{}); \
                     a page that reached it under another name is refused (DNS rebinding)",
                    self.hosts[0]
                ),
            ));
        }
        let origin = headers.get(header::ORIGIN).and_then(|h| h.to_str().ok());
        if let Some(origin) = origin
            && !self.origins.iter().any(|o| o.eq_ignore_ascii_case(origin))
        {
            return Some((
                StatusCode::FORBIDDEN,
                format!("refused: a request from origin {origin:?} (only this page may use it)"),
            ));
        }
        let mutation = !matches!(*method, Method::GET | Method::HEAD);
        if !mutation {
            return None;
        }
        if origin.is_none() {
            return Some((
                StatusCode::FORBIDDEN,
                "refused: a change without an Origin header".into(),
            ));
        }
        let site = headers.get("sec-fetch-site").and_then(|h| h.to_str().ok());
        if site.is_some_and(|s| s != "same-origin") {
            return Some((
                StatusCode::FORBIDDEN,
                format!(
                    "refused: a change from another site (Sec-Fetch-Site: {})",
                    site.unwrap_or("")
                ),
            ));
        }
        let json = headers
            .get(header::CONTENT_TYPE)
            .and_then(|h| h.to_str().ok())
            .is_some_and(|t| t.starts_with("application/json"));
        if !json {
            return Some((
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "refused: changes are JSON (Content-Type: application/json)".into(),
            ));
        }
        let Some(csrf) = self.csrf_for(headers) else {
            return Some((
                StatusCode::UNAUTHORIZED,
                "refused: not logged in (open the link `warden approvals ui --web` printed)".into(),
            ));
        };
        let offered = headers.get(CSRF_HEADER).and_then(|h| h.to_str().ok());
        if !offered.is_some_and(|o| same(o, &csrf)) {
            return Some((
                StatusCode::FORBIDDEN,
                "refused: missing or wrong CSRF token".into(),
            ));
        }
        None
    }
}

/// The value of cookie `name` in `headers`.
pub fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.to_owned())
}

/// The `Set-Cookie` value of a new session, sent back only under `prefix`.
pub fn session_cookie(session: &str, prefix: &str) -> String {
    format!("{COOKIE}={session}; HttpOnly; SameSite=Strict; Path={prefix}/")
}

/// Every request passes here first; every response leaves with headers that keep the
/// page from being framed, sniffed, cached or leaking its URL.
pub async fn guard(
    State(app): State<std::sync::Arc<App>>,
    request: Request<Body>,
    next: Next,
) -> Response {
    let mut response = match app.auth.refuse(request.method(), request.headers()) {
        Some((status, why)) => {
            tracing::warn!("web approver: {why}");
            (status, why).into_response()
        }
        None => next.run(request).await,
    };
    let headers = response.headers_mut();
    for (name, value) in [
        (
            header::CONTENT_SECURITY_POLICY,
            "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; \
             img-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'",
        ),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::REFERRER_POLICY, "no-referrer"),
        (header::CACHE_CONTROL, "no-store"),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    headers.insert(
        "cross-origin-opener-policy",
        HeaderValue::from_static("same-origin"),
    );
    headers.insert(
        "cross-origin-resource-policy",
        HeaderValue::from_static("same-origin"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn auth() -> (Auth, String) {
        Auth::new("127.0.0.1:4000".parse().unwrap(), &approvals::OsRandom).unwrap()
    }

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    #[test]
    fn the_login_link_works_once_and_a_wrong_one_never() {
        let (auth, login) = auth();
        assert!(auth.login("nope").is_err());
        let session = auth.login(&login).unwrap();
        assert!(auth.login(&login).unwrap_err().contains("used already"));
        let h = headers(&[("cookie", &format!("a=b; {COOKIE}={session}"))]);
        assert!(auth.csrf_for(&h).is_some());
        assert!(
            auth.csrf_for(&headers(&[("cookie", "warden_console=x")]))
                .is_none()
        );
    }

    #[test]
    fn host_origin_and_csrf_are_checked() {
        let (auth, login) = auth();
        let session = auth.login(&login).unwrap();
        let cookie = format!("{COOKIE}={session}");
        let csrf = auth.csrf_for(&headers(&[("cookie", &cookie)])).unwrap();
        let ok = [
            ("host", "127.0.0.1:4000"),
            ("origin", "http://127.0.0.1:4000"),
            ("content-type", "application/json"),
            ("cookie", cookie.as_str()),
            (CSRF_HEADER, csrf.as_str()),
        ];
        assert_eq!(auth.refuse(&Method::POST, &headers(&ok)), None);
        let without = |name: &str| -> Vec<(&str, &str)> {
            ok.iter().copied().filter(|(k, _)| *k != name).collect()
        };
        let with = |name: &'static str, value: &'static str| -> Vec<(&str, &str)> {
            let mut v = without(name);
            v.push((name, value));
            v
        };
        for (case, h, status) in [
            (
                "rebinding",
                with("host", "evil.test:4000"),
                StatusCode::MISDIRECTED_REQUEST,
            ),
            ("no host", without("host"), StatusCode::MISDIRECTED_REQUEST),
            (
                "other port",
                with("host", "127.0.0.1:4001"),
                StatusCode::MISDIRECTED_REQUEST,
            ),
            (
                "foreign origin",
                with("origin", "http://127.0.0.1:9999"),
                StatusCode::FORBIDDEN,
            ),
            ("null origin", with("origin", "null"), StatusCode::FORBIDDEN),
            ("no origin", without("origin"), StatusCode::FORBIDDEN),
            (
                "cross-site fetch",
                with("sec-fetch-site", "same-site"),
                StatusCode::FORBIDDEN,
            ),
            (
                "form post",
                with("content-type", "text/plain"),
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ),
            ("no csrf", without(CSRF_HEADER), StatusCode::FORBIDDEN),
            ("wrong csrf", with(CSRF_HEADER, "x"), StatusCode::FORBIDDEN),
            ("no session", without("cookie"), StatusCode::UNAUTHORIZED),
        ] {
            let got = auth.refuse(&Method::POST, &headers(&h)).map(|(s, _)| s);
            assert_eq!(got, Some(status), "{case}");
        }
        // Reads need the right Host (and a right Origin if any), not the CSRF token.
        let read = headers(&[("host", "localhost:4000")]);
        assert_eq!(auth.refuse(&Method::GET, &read), None);
        let read = headers(&[("host", "localhost:4000"), ("origin", "http://evil.test")]);
        assert!(auth.refuse(&Method::GET, &read).is_some());
    }
}
