// The names a run's checkpoint.dir offers besides ckpt-<step>: `last` and `best`, relative
// symlinks to the newest and the best checkpoint (fairseq's checkpoint_last.pt and
// checkpoint_best.pt), replaced atomically after each save; and the reading side, which lets every
// tool's --checkpoint take either one checkpoint or the whole checkpoint.dir. docs/checkpoints.md.
#pragma once

#include <ostream>
#include <string>

namespace nmt {

inline constexpr const char* kLastLink = "last";
inline constexpr const char* kBestLink = "best";

// Points `dir`/`name` at `target` (a name inside `dir`, e.g. "ckpt-1500"): a new symlink under a
// temporary name, renamed over the old one (readers see the old or the new link, never none), the
// directory fsynced. Returns "" on success, else why not (the caller reports it as a warning:
// the checkpoints themselves are complete either way).
std::string update_checkpoint_link(const std::string& dir, const std::string& name,
                                   const std::string& target);

// The checkpoint a --checkpoint argument names. A directory holding state.json is a checkpoint
// and returned as given. A run's checkpoint.dir means its best checkpoint (best.json, the `best`
// link) when evaluation recorded one, else its newest complete one (what `last` points to); the
// choice is written to `note` ("<tool>: <dir> is a checkpoint.dir: using <dir>/ckpt-N (best ...)").
// Anything else is returned as given, for the loader's own message. Throws CheckpointError for a
// checkpoint.dir that holds no complete checkpoint.
std::string resolve_checkpoint_argument(const std::string& path, const std::string& tool,
                                        std::ostream& note);

}  // namespace nmt
