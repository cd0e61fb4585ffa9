//! Rendering a template into a response.

use super::error::ConsoleError;
use axum::response::Html;

/// The HTML of `template`; askama escapes every value unless a template
/// marks it `|safe` (none of ours does on user data).
pub fn render(template: &impl askama::Template) -> Result<Html<String>, ConsoleError> {
    Ok(Html(template.render()?))
}
