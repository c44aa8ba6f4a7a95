// An nmt-prep directory as the trainer reads it: report.json (its nesting bounded, every missing
// field named with the file), and the check that shards were encoded with the vocabulary they are
// used with (by fingerprint, not only by size).
#pragma once

#include <filesystem>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <string>

#include "data/shard.h"
#include "data/vocab.h"

namespace nmt {

// <dir>/report.json, parsed. Throws std::runtime_error naming the file when it is missing or not
// JSON ("is it a directory written by nmt-prep?").
nlohmann::json read_prep_report(const std::filesystem::path& dir);

// The string at report[keys...] (e.g. {"vocab", "file"}); throws std::runtime_error naming
// <dir>/report.json and the dotted key when it is absent or not a string.
std::string prep_report_string(const nlohmann::json& report, const std::filesystem::path& dir,
                               std::initializer_list<const char*> keys);

// Throws std::runtime_error naming the shard and `vocab_file` when the shard was encoded with
// another vocabulary: its recorded size or fingerprint differs from `vocab`'s. `hint` says what to
// do about it (e.g. "prepare the dev set with nmt-prep --vocab <file>").
void check_shard_vocabulary(const Shard& shard, const Vocab& vocab, const std::string& vocab_file,
                            const std::string& hint);

}  // namespace nmt
