//! Opens the session store the configuration names: the embedded SQLite file under
//! `TALARIA_HOME`, or a PostgreSQL database shared across hosts (`[store] url`,
//! `TALARIA_STORE_URL`). Both are a [`SessionStore`]; nothing past here knows which.

use std::sync::Arc;

use talaria_engine::Config;
use talaria_store::{SessionStore, SqliteStore, StoreError};

/// Opens (and migrates) the configured store; blocking, so run it off the runtime. The
/// failpoints `store::open::before` and `store::open::after` stand on either side (a
/// `sleep` there holds the opening: nothing a client asks may wait for it).
pub fn open(config: &Config) -> Result<Arc<dyn SessionStore>, StoreError> {
    talaria_util::failpoint::step("store::open::before");
    let opened: Result<Arc<dyn SessionStore>, StoreError> = match &config.store.url {
        None => SqliteStore::open_or_salvage(&config.home.join("state.db"))
            .map(|store| Arc::new(store) as Arc<dyn SessionStore>),
        Some(url) => open_shared(url, config),
    };
    talaria_util::failpoint::step("store::open::after");
    opened
}

/// Where sessions are kept, for messages (no password).
pub fn describe(config: &Config) -> String {
    match &config.store.url {
        None => config.home.join("state.db").display().to_string(),
        Some(url) => talaria_engine::without_password(url),
    }
}

#[cfg(feature = "postgres")]
fn open_shared(url: &str, config: &Config) -> Result<Arc<dyn SessionStore>, StoreError> {
    let options = talaria_store::PgOptions::parse(url, config.store.passfile.as_deref(), &|key| {
        std::env::var(key).ok()
    })?;
    Ok(Arc::new(talaria_store::PgStore::open(options)?))
}

#[cfg(not(feature = "postgres"))]
fn open_shared(_url: &str, _config: &Config) -> Result<Arc<dyn SessionStore>, StoreError> {
    Err(StoreError::Unsupported(
        "[store] url names a PostgreSQL database, but this build of talaria has no PostgreSQL \
         support (the `postgres` feature)"
            .into(),
    ))
}
