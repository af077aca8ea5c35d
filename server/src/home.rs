//! Talaria's home made private before anything is written there: created 0700, or an
//! existing one open to other users tightened, said in one log line (and where it cannot be,
//! by `talaria doctor`).

use std::path::Path;

use talaria_util::private::{Privacy, private_dir};

/// Makes `TALARIA_HOME` private, for the agent, `setup` and `doctor` alike (blocking: a stat, at most a mkdir or a chmod).
pub fn make_private() {
    let home = talaria_engine::default_home(&|key| std::env::var(key).ok());
    make_private_at(&home);
}

fn make_private_at(home: &Path) {
    match private_dir(home) {
        Ok(Privacy::Created | Privacy::Private) => {}
        Ok(Privacy::Tightened { was }) => tracing::info!(
            "{} was open to other users (mode {was:o}); it holds every session's transcript, \
             so other users' rights to it are taken away",
            home.display()
        ),
        Err(error) => tracing::warn!(
            "cannot make {} private ({error}); other users may read the sessions in it \
             (talaria doctor says more)",
            home.display()
        ),
    }
}
