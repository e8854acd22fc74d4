//! One keep-alive HTTP/1.1 connection to the server (hyper's connection-level client: no pool,
//! no TLS, no redirects), so each load worker owns exactly one TCP connection and the client
//! side costs little next to the server it measures.

use std::net::SocketAddr;

use anyhow::Context as _;
use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::client::conn::http1::SendRequest;
use hyper::header::{AUTHORIZATION, CONTENT_TYPE, HOST, HeaderValue};
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::TokioIo;

/// Where the server is and how to authenticate.
#[derive(Debug, Clone)]
pub struct Target {
    /// Socket address.
    pub addr: SocketAddr,
    /// `Host` header value.
    pub host: HeaderValue,
    /// `Authorization: Bearer …`, when a token was given.
    pub auth: Option<HeaderValue>,
}

impl Target {
    /// Parses `http://HOST:PORT` (an IP address; no path) and an optional token.
    pub fn new(url: &str, token: Option<&str>) -> anyhow::Result<Target> {
        let rest = url
            .strip_prefix("http://")
            .context("the URL must start with http:// (TLS is not supported)")?;
        let hostport = rest.trim_end_matches('/');
        let addr: SocketAddr = hostport
            .parse()
            .with_context(|| format!("`{hostport}` is not IP:PORT"))?;
        let host = HeaderValue::from_str(hostport).context("invalid host")?;
        let auth = token
            .map(|t| HeaderValue::from_str(&format!("Bearer {t}")))
            .transpose()
            .context("the token is not a valid header value")?;
        Ok(Target { addr, host, auth })
    }
}

/// A response: status and the whole body.
#[derive(Debug)]
pub struct Reply {
    /// Status code.
    pub status: StatusCode,
    /// Body bytes.
    pub body: Bytes,
}

impl Reply {
    /// The body as JSON.
    pub fn json(&self) -> anyhow::Result<serde_json::Value> {
        serde_json::from_slice(&self.body).with_context(|| {
            format!(
                "response {} is not JSON: {}",
                self.status,
                String::from_utf8_lossy(&self.body[..self.body.len().min(300)])
            )
        })
    }
}

/// One open connection.
#[derive(Debug)]
pub struct Conn {
    target: Target,
    send: SendRequest<Full<Bytes>>,
}

impl Conn {
    /// Opens a connection (TCP_NODELAY) and drives it on a spawned task.
    pub async fn open(target: &Target) -> anyhow::Result<Conn> {
        let tcp = tokio::net::TcpStream::connect(target.addr)
            .await
            .with_context(|| format!("cannot connect to {}", target.addr))?;
        tcp.set_nodelay(true)?;
        let (send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp)).await?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        Ok(Conn {
            target: target.clone(),
            send,
        })
    }

    /// The server this connection goes to.
    pub fn target(&self) -> &Target {
        &self.target
    }

    /// Sends one request and reads the whole response.
    pub async fn call(
        &mut self,
        method: Method,
        path: &str,
        content_type: Option<&'static str>,
        body: Bytes,
    ) -> anyhow::Result<Reply> {
        let mut b = Request::builder()
            .method(method)
            .uri(path)
            .header(HOST, self.target.host.clone());
        if let Some(a) = &self.target.auth {
            b = b.header(AUTHORIZATION, a.clone());
        }
        if let Some(ct) = content_type {
            b = b.header(CONTENT_TYPE, HeaderValue::from_static(ct));
        }
        let req = b.body(Full::new(body))?;
        self.send.ready().await?;
        let res = self.send.send_request(req).await?;
        let status = res.status();
        let body = res.into_body().collect().await?.to_bytes();
        Ok(Reply { status, body })
    }

    /// `GET path`.
    pub async fn get(&mut self, path: &str) -> anyhow::Result<Reply> {
        self.call(Method::GET, path, None, Bytes::new()).await
    }

    /// `POST path` with a JSON body of the given content type.
    pub async fn post(
        &mut self,
        path: &str,
        content_type: &'static str,
        body: impl Into<Bytes>,
    ) -> anyhow::Result<Reply> {
        self.call(Method::POST, path, Some(content_type), body.into())
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn target_parses_ip_port_and_token() {
        let t = Target::new("http://127.0.0.1:8080/", Some("tA")).unwrap();
        assert_eq!(t.addr.port(), 8080);
        assert_eq!(t.host, "127.0.0.1:8080");
        assert_eq!(t.auth.unwrap(), "Bearer tA");
        assert!(Target::new("https://127.0.0.1:1", None).is_err());
        assert!(Target::new("http://localhost:1", None).is_err());
    }
}
