// PrepDirPublisher: staging beside the target, stale-staging cleanup, rename or exchange.
#include "data/prep_publish.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <set>
#include <stdexcept>

namespace nmt {

namespace fs = std::filesystem;

namespace {

const std::set<std::string>& output_names() {
  static const std::set<std::string> names = {"spm.model",       "vocab.txt",       "report.json",
                                              "train.src.shard", "train.tgt.shard", "dev.src.shard",
                                              "dev.tgt.shard"};
  return names;
}

// The outputs, their temporary names (<name>.tmp-<pid>-<n>) and staging directories of versions
// that staged inside the target.
bool written_by_prep(const std::string& name) {
  if (name.starts_with(".nmt-prep-staging-")) return true;
  size_t tmp = name.find(".tmp-");
  return output_names().count(tmp == std::string::npos ? name : name.substr(0, tmp)) > 0;
}

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "host";
  std::string host = name;
  for (char& c : host)
    if (c == '/' || c == '-') c = '_';  // '-' separates the host from the pid
  return host;
}

// A pid of this host that no longer runs (kill(pid, 0) fails with ESRCH).
bool is_dead(const std::string& pid_text) {
  if (pid_text.empty() || pid_text.find_first_not_of("0123456789") != std::string::npos ||
      pid_text.size() > 10)
    return false;
  long long pid = std::stoll(pid_text);
  return pid > 0 && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH;
}

void fsync_dir(const fs::path& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

std::string error_text(int error) {
  return std::strerror(error);
}

}  // namespace

PrepDirPublisher::PrepDirPublisher(const std::string& out_dir) : out_dir_(out_dir) {
  target_ = fs::absolute(out_dir).lexically_normal();
  if (target_.filename().empty()) target_ = target_.parent_path();  // "out/" names "out"
  std::error_code ec;
  if (fs::exists(target_, ec)) {
    if (!fs::is_directory(target_, ec))
      throw std::runtime_error("--out " + out_dir + " exists and is not a directory");
    for (const fs::directory_entry& e : fs::directory_iterator(target_, ec)) {
      std::string name = e.path().filename().string();
      if (!written_by_prep(name))
        throw std::runtime_error("--out " + out_dir + " holds " + name +
                                 ", which nmt-prep did not write: a run replaces the whole "
                                 "directory, so choose a new or empty one");
    }
  }
  fs::path parent = target_.parent_path();
  fs::create_directories(parent, ec);
  if (ec || !fs::is_directory(parent))
    throw std::runtime_error("cannot create " + parent.string() +
                             (ec ? ": " + ec.message() : ": a file of that name exists"));
  std::string tag = host_name() + "-" + std::to_string(::getpid());
  std::string name = target_.filename().string();
  staging_ = parent / ("." + name + ".nmt-prep-staging-" + tag);
  aside_ = parent / ("." + name + ".nmt-prep-old-" + tag);
  remove_stale_staging();
  fs::remove_all(staging_, ec);
  if (!fs::create_directory(staging_, ec))
    throw std::runtime_error("cannot create " + staging_.string() + ": " + ec.message());
}

PrepDirPublisher::~PrepDirPublisher() {
  std::error_code ec;
  if (!published_) fs::remove_all(staging_, ec);
}

// Staging left by runs of this host that were killed: removed. A directory moved aside by a run
// killed between its two renames is the last complete output: put back when the target is
// missing, else removed. Other hosts' directories (a shared file system) are left alone.
void PrepDirPublisher::remove_stale_staging() const {
  std::error_code ec;
  const std::string host = host_name() + "-";
  const std::string name = target_.filename().string();
  auto dead_run = [&](const std::string& entry, const std::string& prefix) {
    return entry.starts_with(prefix) && entry.substr(prefix.size()).starts_with(host) &&
           is_dead(entry.substr(prefix.size() + host.size()));
  };
  for (const fs::directory_entry& e : fs::directory_iterator(target_.parent_path(), ec)) {
    std::string entry = e.path().filename().string();
    if (dead_run(entry, "." + name + ".nmt-prep-staging-")) {
      fs::remove_all(e.path(), ec);
    } else if (dead_run(entry, "." + name + ".nmt-prep-old-")) {
      if (!fs::exists(target_))
        fs::rename(e.path(), target_, ec);
      else
        fs::remove_all(e.path(), ec);
    }
  }
  // Earlier versions staged inside the target as .nmt-prep-staging-<pid>.
  for (const fs::directory_entry& e : fs::directory_iterator(target_, ec)) {
    std::string entry = e.path().filename().string();
    const std::string prefix = ".nmt-prep-staging-";
    if (entry.starts_with(prefix) && is_dead(entry.substr(prefix.size())))
      fs::remove_all(e.path(), ec);
  }
}

void PrepDirPublisher::publish() {
  fsync_dir(staging_);
  const fs::path parent = target_.parent_path();
  std::error_code ec;
  if (!fs::exists(target_, ec)) {
    if (::rename(staging_.c_str(), target_.c_str()) != 0)
      throw std::runtime_error("cannot rename " + staging_.string() + " to " + out_dir_ + ": " +
                               error_text(errno));
  } else if (::renameat2(AT_FDCWD, staging_.c_str(), AT_FDCWD, target_.c_str(), RENAME_EXCHANGE) ==
             0) {
    // The previous outputs now sit at the staging path.
    fsync_dir(parent);
    fs::remove_all(staging_, ec);
  } else if (errno == EINVAL || errno == ENOSYS || errno == ENOTSUP) {
    if (::rename(target_.c_str(), aside_.c_str()) != 0)
      throw std::runtime_error("cannot move the previous " + out_dir_ +
                               " aside: " + error_text(errno));
    if (::rename(staging_.c_str(), target_.c_str()) != 0) {
      int error = errno;
      ::rename(aside_.c_str(), target_.c_str());
      throw std::runtime_error("cannot rename " + staging_.string() + " to " + out_dir_ + ": " +
                               error_text(error));
    }
    fsync_dir(parent);
    fs::remove_all(aside_, ec);
  } else {
    throw std::runtime_error("cannot replace " + out_dir_ + " with " + staging_.string() + ": " +
                             error_text(errno));
  }
  fsync_dir(parent);
  published_ = true;
}

}  // namespace nmt
