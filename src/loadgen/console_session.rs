//! The console, as the load generator drives it for `--fleet twilio` against a `--target`: an
//! API key may not store credentials or rent numbers (service spec, the key's path mounts), so
//! the run signs in as a console admin, as a person would, and posts the console's own forms:
//! `POST /sign-in` (with the sign-in form's pre-session token and cookie),
//! `POST /settings/credentials/{kind}` and `POST /wallet/numbers`, each with the session's
//! CSRF token.

use anyhow::Context;
use reqwest::header::{COOKIE, LOCATION, SET_COOKIE};
use reqwest::{Response, StatusCode};

/// A signed-in console session.
pub struct ConsoleSession {
    http: reqwest::Client,
    base: String,
    /// The cookies the console set, as `name=value`.
    cookies: Vec<(String, String)>,
    /// The session's CSRF token.
    csrf: String,
}

impl ConsoleSession {
    /// Signs in to the console at `base` as `email`.
    pub async fn sign_in(base: &str, email: &str, password: &str) -> anyhow::Result<Self> {
        let mut session = Self {
            http: reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .timeout(std::time::Duration::from_secs(30))
                .build()?,
            base: base.trim_end_matches('/').to_owned(),
            cookies: Vec::new(),
            csrf: String::new(),
        };
        let form = session.get("/sign-in").await?;
        let token = hidden_field(&form, "_csrf").context("the sign-in form has no _csrf field")?;
        let signed_in = session
            .post_form(
                "/sign-in",
                &[("email", email), ("password", password), ("_csrf", &token)],
            )
            .await?;
        if signed_in.status() != StatusCode::SEE_OTHER {
            anyhow::bail!(
                "signing in to the console as {email} failed (HTTP {})",
                signed_in.status()
            );
        }
        session.keep_cookies(&signed_in);
        let page = session.get("/settings").await?;
        session.csrf = csrf_header(&page)
            .context("the settings page has no CSRF token (is --console-email an admin?)")?;
        Ok(session)
    }

    /// Stores the workspace's `kind` credential through the settings page's form.
    pub async fn save_credential(&self, kind: &str, fields: &[(&str, &str)]) -> anyhow::Result<()> {
        let mut form = fields.to_vec();
        form.push(("_csrf", &self.csrf));
        let saved = self
            .post_form(&format!("/settings/credentials/{kind}"), &form)
            .await?;
        expect_redirect(saved, &format!("storing the {kind} credential")).await
    }

    /// Rents `phone` on `provider` for the workspace (its default number), as the wallet page
    /// does.
    pub async fn rent_number(&self, phone: &str, provider: &str) -> anyhow::Result<()> {
        let added = self
            .post_form(
                "/wallet/numbers",
                &[
                    ("phone", phone),
                    ("provider", provider),
                    ("is_default", "on"),
                    ("rent", "0"),
                    ("_csrf", &self.csrf),
                ],
            )
            .await?;
        expect_redirect(added, &format!("renting {phone} on {provider}")).await
    }

    fn cookie_header(&self) -> String {
        self.cookies
            .iter()
            .map(|(name, value)| format!("{name}={value}"))
            .collect::<Vec<_>>()
            .join("; ")
    }

    /// Keeps the cookies a response set (replacing those of the same name).
    fn keep_cookies(&mut self, response: &Response) {
        for set in response.headers().get_all(SET_COOKIE) {
            let Some((name, value)) = set
                .to_str()
                .ok()
                .and_then(|text| text.split(';').next())
                .and_then(|pair| pair.trim().split_once('='))
            else {
                continue;
            };
            self.cookies.retain(|(kept, _)| kept != name);
            if !value.is_empty() {
                self.cookies.push((name.to_owned(), value.to_owned()));
            }
        }
    }

    /// `GET path`: the page's HTML, its cookies kept.
    async fn get(&mut self, path: &str) -> anyhow::Result<String> {
        let response = self
            .http
            .get(format!("{}{path}", self.base))
            .header(COOKIE, self.cookie_header())
            .send()
            .await
            .with_context(|| format!("GET {path} on the console"))?;
        anyhow::ensure!(
            response.status().is_success(),
            "GET {path} on the console answered HTTP {}",
            response.status()
        );
        self.keep_cookies(&response);
        Ok(response.text().await?)
    }

    async fn post_form(&self, path: &str, form: &[(&str, &str)]) -> anyhow::Result<Response> {
        self.http
            .post(format!("{}{path}", self.base))
            .header(COOKIE, self.cookie_header())
            .form(form)
            .send()
            .await
            .with_context(|| format!("POST {path} on the console"))
    }
}

/// A console form that worked redirects (303); one it refused renders its page again with the
/// reason.
async fn expect_redirect(response: Response, what: &str) -> anyhow::Result<()> {
    let status = response.status();
    if status.is_redirection() && response.headers().contains_key(LOCATION) {
        return Ok(());
    }
    let page = response.text().await.unwrap_or_default();
    let reason = form_error(&page).unwrap_or_default();
    anyhow::bail!("{what} through the console failed (HTTP {status}) {reason}")
}

/// The value of the hidden input `name` in a page.
fn hidden_field(page: &str, name: &str) -> Option<String> {
    let at = page.find(&format!("name=\"{name}\""))?;
    let rest = &page[at..];
    let start = rest.find("value=\"")? + "value=\"".len();
    let len = rest[start..].find('"')?;
    Some(html_unescape(&rest[start..start + len]))
}

/// The session's CSRF token, which the console's layout puts in `hx-headers` on `<body>`.
fn csrf_header(page: &str) -> Option<String> {
    let marker = "X-CSRF-Token&#34;: &#34;";
    let plain = "\"X-CSRF-Token\": \"";
    let (start, end_quote) = match (page.find(plain), page.find(marker)) {
        (Some(at), _) => (at + plain.len(), "\""),
        (None, Some(at)) => (at + marker.len(), "&#34;"),
        (None, None) => return hidden_field(page, "_csrf"),
    };
    let len = page[start..].find(end_quote)?;
    Some(page[start..start + len].to_owned())
}

/// The first error a refused form shows (the settings page's alert, or a field's message), as
/// plain text.
fn form_error(page: &str) -> Option<String> {
    let at = ["role=\"alert\"", "class=\"field-error\" id="]
        .iter()
        .find_map(|marker| page.find(marker))?;
    let rest = &page[at..];
    let start = rest.find('>')? + 1;
    let len = rest[start..].find('<')?;
    Some(html_unescape(rest[start..start + len].trim()))
}

/// Text with the entities askama writes replaced.
fn html_unescape(text: &str) -> String {
    text.replace("&#34;", "\"")
        .replace("&#39;", "'")
        .replace("&quot;", "\"")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_read_from_the_pages() {
        let form = r#"<form><input type="hidden" name="_csrf" value="123.ab-c_d"></form>"#;
        assert_eq!(hidden_field(form, "_csrf").as_deref(), Some("123.ab-c_d"));
        let page = r#"<body hx-headers='{"X-CSRF-Token": "tok3n"}'>"#;
        assert_eq!(csrf_header(page).as_deref(), Some("tok3n"));
        let escaped = r#"<body hx-headers='{&#34;X-CSRF-Token&#34;: &#34;tok3n&#34;}'>"#;
        assert_eq!(csrf_header(escaped).as_deref(), Some("tok3n"));
    }
}
