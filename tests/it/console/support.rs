//! What console tests share: people to sign in as, an HTTP client that
//! keeps a session like a browser does, and a real headless Chromium.

use crate::support::{TestApp, Workspace};
use fantoccini::{Client, ClientBuilder, Locator};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::LazyLock;
use std::time::Duration;
use tokio::sync::{Semaphore, SemaphorePermit};
use voxline::domain::{Password, Role, UserId};
use voxline::store::users::NewUser;

/// A person of a workspace who can sign in.
#[derive(Debug, Clone)]
pub struct Person {
    /// Their id.
    pub id: UserId,
    /// Sign-in address.
    pub email: String,
    /// Their password.
    pub password: String,
}

/// Adds a person with `role` to `ws`, as `voxline admin user create` does.
pub async fn person(app: &TestApp, ws: &Workspace, role: Role) -> Person {
    let id = UserId::new();
    // The id's random tail: ids made in the same millisecond share their head.
    let email = format!("{}-{}@example.com", role.as_str(), &id.to_string()[24..]);
    let password = format!("pw-{}-long-enough", &id.to_string()[24..]);
    let hash = voxline::access::password::hash(&Password::parse(&password).unwrap()).unwrap();
    app.store()
        .insert_user(&NewUser {
            id,
            org_id: ws.org_id,
            email: &email,
            password_hash: &hash,
            role,
            now_ms: app.now().timestamp_millis(),
        })
        .await
        .expect("insert person");
    Person {
        id,
        email,
        password,
    }
}

/// A page fetched through [`ConsoleClient`].
#[derive(Debug)]
pub struct Page {
    /// HTTP status.
    pub status: u16,
    /// Response headers.
    pub headers: reqwest::header::HeaderMap,
    /// The body as text.
    pub body: String,
}

/// An HTTP client signed in to the console: it keeps the session cookie and
/// sends the CSRF token with every form, as the pages do.
pub struct ConsoleClient {
    http: reqwest::Client,
    base: String,
    cookie: String,
    /// The session's CSRF token, read from a page.
    pub csrf: String,
}

/// The sign-in form's pre-session token as a browser holds it after
/// opening `/sign-in`: the cookie and the form's hidden `_csrf` field.
#[derive(Debug, Clone)]
pub struct SignInToken {
    /// `name=value` of the pre-session cookie.
    pub cookie: String,
    /// The form's `_csrf` field.
    pub field: String,
}

/// Opens `/sign-in` with a client that keeps no cookies and reads the
/// pre-session token off the answer.
pub async fn sign_in_token(app: &TestApp) -> SignInToken {
    let resp = no_redirects()
        .get(format!("{}/sign-in", app.base))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let cookie = set_cookie(resp.headers(), "voxline_sign_in").expect("a pre-session cookie");
    let field = csrf_of(&resp.text().await.unwrap()).expect("a _csrf field on the sign-in form");
    SignInToken { cookie, field }
}

/// `POST /sign-in` as the form sends it, with `token`'s cookie and field,
/// `fields` and the extra `headers`.
pub async fn post_sign_in(
    app: &TestApp,
    token: &SignInToken,
    fields: &[(&str, &str)],
    headers: &[(&str, &str)],
) -> reqwest::Response {
    let mut all = vec![("_csrf", token.field.as_str())];
    all.extend_from_slice(fields);
    let mut req = no_redirects()
        .post(format!("{}/sign-in", app.base))
        .header("cookie", &token.cookie)
        .form(&all);
    for (name, value) in headers {
        req = req.header(*name, *value);
    }
    req.send().await.unwrap()
}

/// An HTTP client that does not follow redirects (to see the 303s).
pub fn no_redirects() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

/// `name=value` of the cookie `name` a response sets, among all its
/// `Set-Cookie` headers.
pub fn set_cookie(headers: &reqwest::header::HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .filter_map(|v| v.split(';').next())
        .find(|pair| pair.split_once('=').is_some_and(|(n, _)| n == name))
        .map(str::to_string)
}

impl ConsoleClient {
    /// Signs `person` in as a browser does (the form first, for its
    /// pre-session token); panics when the sign-in is refused.
    pub async fn sign_in(app: &TestApp, person: &Person) -> Self {
        let token = sign_in_token(app).await;
        let resp = post_sign_in(
            app,
            &token,
            &[
                ("email", person.email.as_str()),
                ("password", person.password.as_str()),
                ("next", "/account"),
            ],
            &[],
        )
        .await;
        assert_eq!(resp.status(), 303, "sign-in of {}", person.email);
        let cookie = set_cookie(resp.headers(), "voxline_session").expect("a session cookie");
        let mut client = Self {
            http: no_redirects(),
            base: app.base.clone(),
            cookie,
            csrf: String::new(),
        };
        let account = client.get("/account").await;
        assert_eq!(account.status, 200, "{}", account.body);
        client.csrf = csrf_of(&account.body).expect("a CSRF token on the page");
        client
    }

    /// `GET path`.
    pub async fn get(&self, path: &str) -> Page {
        let resp = self
            .http
            .get(format!("{}{path}", self.base))
            .header("cookie", &self.cookie)
            .send()
            .await
            .unwrap();
        page(resp).await
    }

    /// `POST path` as a urlencoded form with the session's CSRF token.
    pub async fn post_form(&self, path: &str, fields: &[(&str, &str)]) -> Page {
        let mut all: Vec<(&str, &str)> = vec![("_csrf", self.csrf.as_str())];
        all.extend_from_slice(fields);
        self.post_form_raw(path, &all).await
    }

    /// `POST path` as a urlencoded form with exactly `fields` (no token added).
    pub async fn post_form_raw(&self, path: &str, fields: &[(&str, &str)]) -> Page {
        self.post_form_with_headers(path, fields, &[]).await
    }

    /// `POST path` as a urlencoded form with exactly `fields` and the extra
    /// `headers` (an `Origin`, say).
    pub async fn post_form_with_headers(
        &self,
        path: &str,
        fields: &[(&str, &str)],
        headers: &[(&str, &str)],
    ) -> Page {
        let mut req = self
            .http
            .post(format!("{}{path}", self.base))
            .header("cookie", &self.cookie)
            .form(fields);
        for (name, value) in headers {
            req = req.header(*name, *value);
        }
        page(req.send().await.unwrap()).await
    }

    /// `POST path` as htmx sends it: the token in `X-CSRF-Token`.
    pub async fn htmx_post(&self, path: &str, fields: &[(&str, &str)]) -> Page {
        let resp = self
            .http
            .post(format!("{}{path}", self.base))
            .header("cookie", &self.cookie)
            .header("hx-request", "true")
            .header("x-csrf-token", &self.csrf)
            .form(fields)
            .send()
            .await
            .unwrap();
        page(resp).await
    }

    /// `POST path` as htmx sends a multipart form, with the token header.
    #[allow(dead_code)] // for the upload pages' tests
    pub async fn htmx_multipart(&self, path: &str, form: reqwest::multipart::Form) -> Page {
        let resp = self
            .http
            .post(format!("{}{path}", self.base))
            .header("cookie", &self.cookie)
            .header("hx-request", "true")
            .header("x-csrf-token", &self.csrf)
            .multipart(form)
            .send()
            .await
            .unwrap();
        page(resp).await
    }
}

async fn page(resp: reqwest::Response) -> Page {
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let body = resp.text().await.unwrap();
    Page {
        status,
        headers,
        body,
    }
}

/// The CSRF token in a page's hidden `_csrf` input.
pub fn csrf_of(html: &str) -> Option<String> {
    let at = html.find("name=\"_csrf\" value=\"")? + "name=\"_csrf\" value=\"".len();
    let rest = &html[at..];
    Some(rest[..rest.find('"')?].to_string())
}

/// One browser at a time: Chromium is heavy on a 2-core machine.
static BROWSERS: LazyLock<Semaphore> = LazyLock::new(|| Semaphore::const_new(1));

/// A headless Chromium driven through chromedriver on a port of its own.
pub struct Browser {
    /// The WebDriver session.
    pub client: Client,
    _driver: tokio::process::Child,
    _permit: SemaphorePermit<'static>,
}

fn find(names: &[&str]) -> Option<PathBuf> {
    names.iter().find_map(|n| {
        let p = Path::new(n);
        if p.is_absolute() {
            p.exists().then(|| p.to_path_buf())
        } else {
            std::env::var_os("PATH").and_then(|path| {
                std::env::split_paths(&path)
                    .map(|dir| dir.join(n))
                    .find(|c| c.exists())
            })
        }
    })
}

impl Browser {
    /// A fresh browser, or None (with a printed reason) when Chromium or
    /// chromedriver is not installed.
    pub async fn start() -> Option<Browser> {
        let Some(driver) = find(&["chromedriver", "/usr/lib/chromium/chromedriver"]) else {
            eprintln!("skipped: chromedriver not found (apt-get install chromium chromium-driver)");
            return None;
        };
        let Some(chromium) = find(&["chromium", "chromium-browser", "google-chrome"]) else {
            eprintln!("skipped: chromium not found (apt-get install chromium chromium-driver)");
            return None;
        };
        let permit = BROWSERS.acquire().await.unwrap();
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let child = tokio::process::Command::new(driver)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("chromedriver starts");
        let caps: serde_json::Map<String, serde_json::Value> = serde_json::from_value(serde_json::json!({
            "goog:chromeOptions": {
                "binary": chromium,
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                         "--window-size=1280,900", "--autoplay-policy=no-user-gesture-required"]
            }
        }))
        .unwrap();
        let url = format!("http://127.0.0.1:{port}");
        let mut last = None;
        // The client's TLS config needs the process's provider chosen (see the server's
        // `install_tls_provider`), and this may run before any server starts.
        voxline::app::server::install_tls_provider();
        for _ in 0..100 {
            match ClientBuilder::rustls()
                .expect("tls roots")
                .capabilities(caps.clone())
                .connect(&url)
                .await
            {
                Ok(client) => {
                    return Some(Browser {
                        client,
                        _driver: child,
                        _permit: permit,
                    });
                }
                Err(e) => last = Some(e),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("chromedriver did not answer: {last:?}");
    }

    /// Signs `person` in through the sign-in form; the browser ends on
    /// their account page.
    pub async fn sign_in(&self, app: &TestApp, person: &Person) {
        self.goto(app, "/sign-in?next=/account").await;
        self.fill(Locator::Id("email"), &person.email).await;
        self.fill(Locator::Id("password"), &person.password).await;
        self.click(Locator::Css("form[action='/sign-in'] button[type=submit]"))
            .await;
        self.wait_for(Locator::Css("header.top")).await;
    }

    /// Opens `path` of `app`.
    pub async fn goto(&self, app: &TestApp, path: &str) {
        self.client
            .goto(&format!("{}{path}", app.base))
            .await
            .unwrap();
    }

    /// Types `text` into the element `locator` finds, once it is on the page.
    pub async fn fill(&self, locator: Locator<'_>, text: &str) {
        self.wait_for(locator).await.send_keys(text).await.unwrap();
    }

    /// Clicks the element `locator` finds, once it is on the page.
    pub async fn click(&self, locator: Locator<'_>) {
        self.wait_for(locator).await.click().await.unwrap();
    }

    /// The text of the element `locator` finds, once it is on the page.
    pub async fn text(&self, locator: Locator<'_>) -> String {
        self.wait_for(locator).await.text().await.unwrap()
    }

    /// Waits (up to 20 s) for an element to be on the page.
    pub async fn wait_for(&self, locator: Locator<'_>) -> fantoccini::elements::Element {
        self.client
            .wait()
            .at_most(Duration::from_secs(20))
            .for_element(locator)
            .await
            .unwrap()
    }

    /// Saves the page as `docs/screenshots/<name>.png` when
    /// `VOXLINE_SCREENSHOTS=1` (the README's pictures come from here).
    pub async fn screenshot(&self, name: &str) {
        if std::env::var("VOXLINE_SCREENSHOTS").as_deref() != Ok("1") {
            return;
        }
        let png = self.client.screenshot().await.unwrap();
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/screenshots");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(format!("{name}.png")), png).unwrap();
    }

    /// Ends the WebDriver session (the driver process ends on drop).
    pub async fn close(self) {
        let _ = self.client.close().await;
    }
}
