// nmt-prep end to end on a slice of bible-en-es, drop reasons, dev handling, OpenSeq2Seq input,
// and the no-half-written-output rule.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "data/batcher.h"
#include "data/prep.h"
#include "data/shard.h"
#include "test/data/data_test_util.h"
#include "test/support/catch.h"
#include "test/support/lib/scratch_dir.h"

using namespace nmt;
using nmt::test::contains;
using nmt::test::error_of;
using nmt::test::head_lines;
using nmt::test::join_lines;
using nmt::test::ScratchDir;
using nmt::test::write_text;

namespace {

const std::string kBible = nmt::test::shared_data_dir() + "/bible-en-es/";

// The first 2000 train pairs and 100 dev pairs, prepped once with a 500-piece vocabulary.
struct PreppedBible {
  ScratchDir dir;
  std::vector<std::string> train_en, train_es, dev_en;
  PrepReport report;
  std::string out;

  PreppedBible() {
    train_en = head_lines(kBible + "train.en", 2000);
    train_es = head_lines(kBible + "train.es", 2000);
    dev_en = head_lines(kBible + "dev.en", 100);
    write_text(dir.file("train.en"), join_lines(train_en));
    write_text(dir.file("train.es"), join_lines(train_es));
    write_text(dir.file("dev.en"), join_lines(dev_en));
    write_text(dir.file("dev.es"), join_lines(head_lines(kBible + "dev.es", 100)));
    PrepOptions o;
    o.train_source = dir.file("train.en");
    o.train_target = dir.file("train.es");
    o.dev_source = dir.file("dev.en");
    o.dev_target = dir.file("dev.es");
    out = dir.file("out");
    o.out_dir = out;
    o.spm.vocab_size = 500;
    o.threads = 2;
    report = run_prep(o);
  }
};

const PreppedBible& prepped_bible() {
  static PreppedBible prepped;
  return prepped;
}

PrepOptions small_options(const ScratchDir& dir) {
  PrepOptions o;
  o.train_source = dir.file("src");
  o.train_target = dir.file("tgt");
  o.out_dir = dir.file("out");
  o.vocab_path = prepped_bible().out + "/spm.model";
  o.threads = 2;
  return o;
}

}  // namespace

TEST_CASE("prep on a slice of bible-en-es writes model, shards and report", "[prep]") {
  REQUIRE(std::filesystem::exists(kBible + "train.en"));
  const PreppedBible& p = prepped_bible();
  REQUIRE(p.train_en.size() == 2000);
  const std::filesystem::path out = p.out;
  for (const char* name : {"spm.model", "train.src.shard", "train.tgt.shard", "dev.src.shard",
                           "dev.tgt.shard", "report.json"})
    REQUIRE(std::filesystem::exists(out / name));
  // Only the outputs: no staging directory or temporary file is left.
  REQUIRE(std::distance(std::filesystem::directory_iterator(out), {}) == 6);

  const PrepReport& r = p.report;
  REQUIRE(r.vocab_size == 500);
  REQUIRE(r.train.pairs_read == 2000);
  REQUIRE(r.train.pairs_kept + r.train.dropped.total() == 2000);
  REQUIRE(r.train.pairs_kept > 1950);
  REQUIRE(r.dev->pairs_read == 100);
  REQUIRE(r.dev->pairs_kept == 100);

  std::ifstream report_file(out / "report.json");
  const auto json = nlohmann::json::parse(report_file);
  REQUIRE(json["vocab"]["size"] == 500);
  REQUIRE(json["vocab"]["special_ids"]["eos"] == 3);
  REQUIRE(json["splits"]["train"]["pairs_read"] == 2000);
  REQUIRE(json["splits"]["train"]["source"]["tokens"] == r.train.source.tokens);
  REQUIRE(json["splits"]["train"]["target"]["shard_bytes"] ==
          std::filesystem::file_size(out / "train.tgt.shard"));
  REQUIRE(json["splits"]["dev"]["pairs_kept"] == 100);

  ShardCorpus train((out / "train.src.shard").string(), (out / "train.tgt.shard").string());
  REQUIRE(train.size() == r.train.pairs_kept);
  REQUIRE(train.source_shard().tokens() == r.train.source.tokens);
  REQUIRE(train.source_shard().header().id_bytes == 2);

  // The model has our special ids and decodes the shards back to the text.
  const auto vocab = load_vocab((out / "spm.model").string());
  REQUIRE(vocab->fingerprint() == train.source_shard().vocab_fingerprint());
  REQUIRE(vocab->piece(kPadId) == "<pad>");
  REQUIRE(vocab->piece(kEosId) == "</s>");
  ShardCorpus dev((out / "dev.src.shard").string(), (out / "dev.tgt.shard").string());
  std::vector<int32_t> ids;
  int exact = 0;
  for (int64_t i = 0; i < 100; ++i) {
    dev.source(i, ids);
    exact += vocab->decode(ids) == p.dev_en[i];
  }
  REQUIRE(exact >= 95);  // NFKC normalisation may change a rare character

  // The batcher runs on the shards.
  TokenBatcherOptions bo;
  bo.max_tokens = 2048;
  TokenBatcher batcher(train, bo);
  const Batch b = batcher.next();
  REQUIRE(b.sentences > 0);
  REQUIRE(b.src_len % 8 == 0);
}

TEST_CASE("prep drops bad train pairs and counts them by reason", "[prep]") {
  ScratchDir dir;
  const auto& bible = prepped_bible();
  std::vector<std::string> src(bible.train_en.begin(), bible.train_en.begin() + 200);
  std::vector<std::string> tgt(bible.train_es.begin(), bible.train_es.begin() + 200);
  src[3] = "bad \xFF byte";                        // invalid UTF-8 in the source
  tgt[4] = "mala \xC3 secuencia";                  // truncated sequence in the target
  src[5] = "";                                     // empty source
  tgt[6] = "   \t ";                               // blank target
  src[7] = src[8] + " " + src[9] + " " + src[10];  // far over --max-len 60
  tgt[7] = tgt[8] + " " + tgt[9] + " " + tgt[10];
  src[11] = "In the beginning God created the heavens and the earth.";
  tgt[11] = "Sí.";  // a sentence against one word: ratio
  write_text(dir.file("src"), join_lines(src));
  write_text(dir.file("tgt"), join_lines(tgt));
  PrepOptions o = small_options(dir);
  o.max_length = 60;
  o.max_ratio = 3.0;
  const PrepReport r = run_prep(o);
  REQUIRE(r.train.pairs_read == 200);
  REQUIRE(r.train.dropped.invalid_utf8 == 2);
  REQUIRE(r.train.dropped.empty == 2);
  REQUIRE(r.train.dropped.too_long >= 1);
  REQUIRE(r.train.dropped.length_ratio >= 1);
  REQUIRE(r.train.pairs_kept == 200 - r.train.dropped.total());
  const auto json = nlohmann::json::parse(nmt::test::read_text(dir.file("out/report.json")));
  REQUIRE(json["splits"]["train"]["dropped"]["invalid_utf8"] == 2);
  REQUIRE(json["splits"]["train"]["dropped"]["empty"] == 2);
  REQUIRE(Shard(dir.file("out/train.src.shard")).sentences() == r.train.pairs_kept);
}

TEST_CASE("prep keeps every dev line, repairing invalid UTF-8 and flagging it", "[prep]") {
  ScratchDir dir;
  const auto& bible = prepped_bible();
  write_text(dir.file("src"), join_lines({bible.train_en.begin(), bible.train_en.begin() + 50}));
  write_text(dir.file("tgt"), join_lines({bible.train_es.begin(), bible.train_es.begin() + 50}));
  write_text(dir.file("dsrc"), "In the beginning\nbroken \xFF text\n\nlast line\n");
  write_text(dir.file("dtgt"), "En el principio\ntexto roto\nalgo\n\xC3\n");
  PrepOptions o = small_options(dir);
  o.dev_source = dir.file("dsrc");
  o.dev_target = dir.file("dtgt");
  const PrepReport r = run_prep(o);
  REQUIRE(r.dev->pairs_read == 4);
  REQUIRE(r.dev->pairs_kept == 4);
  REQUIRE(r.dev->dropped.total() == 0);
  REQUIRE(r.dev->flagged.invalid_utf8 == 2);
  REQUIRE(r.dev->flagged.empty == 1);
  ShardCorpus dev(dir.file("out/dev.src.shard"), dir.file("out/dev.tgt.shard"));
  REQUIRE(dev.size() == 4);
  REQUIRE(dev.source_length(2) == 0);  // the empty line stays, aligned with its reference
}

TEST_CASE("prep refuses misaligned input and writes nothing", "[prep]") {
  ScratchDir dir;
  write_text(dir.file("src"), "one\ntwo\nthree\n");
  write_text(dir.file("tgt"), "uno\ndos\n");
  PrepOptions o = small_options(dir);
  const std::string e = error_of([&] { run_prep(o); });
  REQUIRE(contains(e, dir.file("src") + " has 3 lines"));
  REQUIRE(contains(e, dir.file("tgt") + " has 2 lines"));
  REQUIRE_FALSE(std::filesystem::exists(dir.file("out")));
}

TEST_CASE("prep that fails late leaves no output and no staging behind", "[prep]") {
  ScratchDir dir;
  write_text(dir.file("src"), "the cat sat\nthe dog ran\n");
  write_text(dir.file("tgt"), "el gato\nel perro\n");
  PrepOptions o = small_options(dir);
  o.max_length = 1;  // every pair dropped as too long: the run fails after encoding
  REQUIRE(contains(error_of([&] { run_prep(o); }), "survived"));
  // The outputs are staged beside out/ and swapped in whole: nothing of this run is left.
  REQUIRE_FALSE(std::filesystem::exists(dir.file("out")));
  for (const auto& entry : std::filesystem::directory_iterator(dir.path()))
    REQUIRE_FALSE(contains(entry.path().filename().string(), "nmt-prep-staging"));
}

TEST_CASE("prep without usable training text fails before training a vocabulary", "[prep]") {
  ScratchDir dir;
  write_text(dir.file("src"), "\n\n");  // blank source lines: no pair passes the text checks
  write_text(dir.file("tgt"), "a\nb\n");
  PrepOptions o = small_options(dir);
  o.vocab_path.clear();  // SentencePiece would fail with its own message
  std::string e = error_of([&] { run_prep(o); });
  REQUIRE(contains(e, "no usable train pair in " + dir.file("src")));
  REQUIRE_FALSE(std::filesystem::exists(dir.file("out")));
  write_text(dir.file("src"), "");
  write_text(dir.file("tgt"), "");
  REQUIRE(contains(error_of([&] { run_prep(o); }), " are empty: no training text"));
  REQUIRE_FALSE(std::filesystem::exists(dir.file("out")));
}

TEST_CASE("prep replaces an existing directory whole and refuses one with other files", "[prep]") {
  ScratchDir dir;
  write_text(dir.file("src"), "the cat sat\nthe dog ran\n");
  write_text(dir.file("tgt"), "el gato se sento\nel perro corrio\n");
  PrepOptions o = small_options(dir);
  run_prep(o);
  const auto first = std::filesystem::last_write_time(dir.file("out/report.json"));
  // Staging of a killed run of this host (a pid that cannot exist) is removed by the next run.
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  std::string tag = host;
  for (char& c : tag)
    if (c == '-' || c == '/') c = '_';
  const std::string stale = dir.file(".out.nmt-prep-staging-" + tag + "-2147480000");
  std::filesystem::create_directory(stale);
  run_prep(o);
  REQUIRE(std::filesystem::last_write_time(dir.file("out/report.json")) >= first);
  REQUIRE_FALSE(std::filesystem::exists(stale));
  write_text(dir.file("out/notes.txt"), "mine\n");
  REQUIRE(
      contains(error_of([&] { run_prep(o); }), "holds notes.txt, which nmt-prep did not write"));
  REQUIRE(std::filesystem::exists(dir.file("out/notes.txt")));
}

TEST_CASE("prep encodes OpenSeq2Seq-style pre-tokenized text with its vocabulary", "[prep]") {
  ScratchDir dir;
  write_text(dir.file("m_common.vocab"),
             "<pad>\t0\n</s>\t0\n<s>\t0\n<unk>\t0\n"
             "\u2581the\t0\n\u2581cat\t0\n\u2581el\t0\n\u2581gato\t0\n"
             ".\t0\n");
  write_text(dir.file("train.clean.en.shuffled.BPE_common.32K.tok"),
             "\u2581the \u2581cat .\n\u2581the \u2581dog .\n");
  write_text(dir.file("train.clean.es.shuffled.BPE_common.32K.tok"),
             "\u2581el \u2581gato .\n\u2581el \u2581perro .\n");
  PrepOptions o;
  o.train_source = dir.file("train.clean.en.shuffled.BPE_common.32K.tok");
  o.train_target = dir.file("train.clean.es.shuffled.BPE_common.32K.tok");
  o.vocab_path = dir.file("m_common.vocab");
  o.out_dir = dir.file("out");
  const PrepReport r = run_prep(o);
  REQUIRE(r.vocab_kind == "pieces");
  REQUIRE(r.vocab_file == "vocab.txt");
  REQUIRE(r.vocab_size == 9);
  REQUIRE(r.train.pairs_kept == 2);
  REQUIRE(r.train.source.unk_tokens == 1);  // ▁dog
  REQUIRE(r.train.target.unk_tokens == 1);  // ▁perro
  ShardCorpus train(dir.file("out/train.src.shard"), dir.file("out/train.tgt.shard"));
  std::vector<int32_t> ids;
  train.source(0, ids);
  REQUIRE(ids == std::vector<int32_t>{4, 5, 8});
  train.target(1, ids);
  REQUIRE(ids == std::vector<int32_t>{6, kUnkId, 8});
  const auto vocab = load_vocab(dir.file("out/vocab.txt"));
  REQUIRE(vocab->fingerprint() == train.source_shard().vocab_fingerprint());
  train.target(0, ids);
  REQUIRE(vocab->decode(ids) == "el gato.");
}

TEST_CASE("prep rejects inconsistent options", "[prep]") {
  ScratchDir dir;
  PrepOptions o = small_options(dir);
  o.dev_source = dir.file("src");
  REQUIRE(contains(error_of([&] { run_prep(o); }), "both dev files"));
  o = small_options(dir);
  o.max_ratio = 0.5;
  REQUIRE(contains(error_of([&] { run_prep(o); }), "max ratio"));
  o = small_options(dir);
  REQUIRE(contains(error_of([&] { run_prep(o); }), dir.file("src")));  // missing input
}
