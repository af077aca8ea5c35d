//! Which calls of a batch may run together: read-only calls together, path-scoped calls
//! together when their paths do not overlap, anything else alone; in the model's order.

use std::path::PathBuf;

use talaria_tools::Concurrency;

use super::{MAX_PARALLEL, Prepared};

fn overlaps(a: &[PathBuf], b: &[PathBuf]) -> bool {
    a.iter()
        .any(|x| b.iter().any(|y| x.starts_with(y) || y.starts_with(x)))
}

/// Splits a batch into groups that may run together, preserving order.
pub(super) fn plan_groups(calls: &[Prepared]) -> Vec<Vec<usize>> {
    let mut groups: Vec<Vec<usize>> = Vec::new();
    let mut current: Vec<usize> = Vec::new();
    let mut read_paths: Vec<PathBuf> = Vec::new();
    let mut write_paths: Vec<PathBuf> = Vec::new();
    for (index, call) in calls.iter().enumerate() {
        let concurrency = if call.args.is_ok() {
            call.concurrency
        } else {
            Concurrency::Exclusive
        };
        let paths = &call.description.paths;
        let fits = current.len() < MAX_PARALLEL
            && match concurrency {
                Concurrency::ReadOnly => !overlaps(paths, &write_paths),
                Concurrency::PathScoped => {
                    !paths.is_empty()
                        && !overlaps(paths, &write_paths)
                        && !overlaps(paths, &read_paths)
                }
                Concurrency::Exclusive => false,
            };
        if !fits && !current.is_empty() {
            groups.push(std::mem::take(&mut current));
            read_paths.clear();
            write_paths.clear();
        }
        if concurrency == Concurrency::Exclusive {
            groups.push(vec![index]);
            continue;
        }
        match concurrency {
            Concurrency::PathScoped => write_paths.extend(paths.iter().cloned()),
            _ => read_paths.extend(paths.iter().cloned()),
        }
        current.push(index);
    }
    if !current.is_empty() {
        groups.push(current);
    }
    groups
}
