// Publishing nmt-prep's output directory atomically: everything is built in a staging directory
// beside the target (same file system) and swapped in by one rename, so a reader (or a run killed
// at any moment) sees the complete old directory or the complete new one, never a mix of the two.
#pragma once

#include <filesystem>
#include <string>

namespace nmt {

class PrepDirPublisher {
 public:
  // Checks the target (`out_dir`: absent, or a directory holding only nmt-prep outputs), removes
  // staging directories of earlier killed runs on this host, creates the parent directories and a
  // fresh staging directory. Throws std::runtime_error naming the path.
  explicit PrepDirPublisher(const std::string& out_dir);
  ~PrepDirPublisher();  // removes the staging directory unless published
  PrepDirPublisher(const PrepDirPublisher&) = delete;
  PrepDirPublisher& operator=(const PrepDirPublisher&) = delete;

  // Where to write the outputs.
  const std::filesystem::path& staging() const { return staging_; }
  // Makes the staging directory the target: renamed into place, or atomically exchanged with the
  // existing directory (renameat2 RENAME_EXCHANGE; where the file system lacks it, the old one is
  // moved aside first and restored by the next run if this one dies in between). The previous
  // outputs are then deleted.
  void publish();

 private:
  void remove_stale_staging() const;

  std::string out_dir_;            // as given, for messages
  std::filesystem::path target_;   // absolute, normalised
  std::filesystem::path staging_;  // <parent>/.<name>.nmt-prep-staging-<host>-<pid>
  std::filesystem::path aside_;    // <parent>/.<name>.nmt-prep-old-<host>-<pid>
  bool published_ = false;
};

}  // namespace nmt
