// `last` and `best` symlinks in checkpoint.dir, and --checkpoint arguments that name the directory.
#include "engine/checkpoint/checkpoint_links.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <sstream>

#include "engine/checkpoint/checkpoint.h"
#include "engine/checkpoint/checkpoint_layout.h"

namespace nmt {

namespace fs = std::filesystem;

std::string update_checkpoint_link(const std::string& dir, const std::string& name,
                                   const std::string& target) {
  // A ".ckpt-" name: remove_leftovers clears it if a crash leaves it behind.
  const std::string temp = dir + "/.ckpt-" + name + ".tmp-" + std::to_string(::getpid());
  const std::string path = dir + "/" + name;
  std::error_code ec;
  fs::remove(temp, ec);
  if (::symlink(target.c_str(), temp.c_str()) != 0)
    return "cannot create the link " + path + " -> " + target + ": " + std::strerror(errno);
  if (std::rename(temp.c_str(), path.c_str()) != 0) {
    std::string why = std::strerror(errno);
    fs::remove(temp, ec);
    return "cannot replace " + path + " (a directory of that name?): " + why;
  }
  try {
    fsync_directory(dir);
  } catch (const CheckpointError& e) {
    return e.what();
  }
  return "";
}

std::string resolve_checkpoint_argument(const std::string& path, const std::string& tool,
                                        std::ostream& note) {
  std::error_code ec;
  if (!fs::is_directory(path, ec) || fs::exists(fs::path(path) / checkpoint_layout::kStateFile, ec))
    return path;
  std::optional<BestCheckpoint> best = read_best_checkpoint(path);
  if (best && fs::is_directory(best->path, ec)) {
    std::ostringstream value;
    value << best->metric.value;
    note << tool << ": " << path << " is a checkpoint.dir: using " << best->path << " (best "
         << best->metric.name << " " << value.str() << ")\n";
    return best->path;
  }
  std::ostringstream warnings;
  std::optional<std::string> last = find_latest_checkpoint(path, warnings);
  if (!last)
    throw CheckpointError(path + " is neither a checkpoint (no state.json) nor a checkpoint.dir " +
                          "holding one (no complete ckpt-<step>)" +
                          (warnings.str().empty() ? "" : ":\n" + warnings.str()));
  note << warnings.str() << tool << ": " << path << " is a checkpoint.dir: using " << *last
       << " (the newest; no best recorded)\n";
  return *last;
}

}  // namespace nmt
