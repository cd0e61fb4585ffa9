//! `/api/ratings`: post-call scorecards, by what a request does: `reads`
//! (list, one call's, by phone), `stats` (counts, averages, per-column
//! distributions), `exports` (streamed CSV, Google Sheets) and `rescoring`
//! (rate-now, regenerate, bulk-regenerate, reload); `query` parses the
//! filters and call ids they share.

mod exports;
mod query;
mod reads;
mod rescoring;
mod stats;

pub use exports::{ExportSheetRequest, RatingsExport};
pub use reads::{ColumnView, PhoneRatings, RatingView};
pub use rescoring::{BulkRegenerateRequest, QueuedBody};
pub use stats::{AgentAverage, Bucket, Distribution, RatingAnalytics, RatingStats};

use crate::http::state::AppState;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

/// The rating routes; static paths win over `/api/ratings/{callId}`.
pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(reads::list_ratings))
        .routes(routes!(stats::rating_stats))
        .routes(routes!(stats::rating_analytics))
        .routes(routes!(exports::export_all))
        .routes(routes!(exports::export_sheet))
        .routes(routes!(rescoring::bulk_regenerate))
        .routes(routes!(rescoring::reload))
        .routes(routes!(reads::ratings_by_phone))
        .routes(routes!(reads::get_rating))
        .routes(routes!(rescoring::rate_now))
        .routes(routes!(rescoring::regenerate))
}
