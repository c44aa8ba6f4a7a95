// Shard format: round trips at both id widths, atomic writing, and every validation error on open.
#include <cstring>
#include <filesystem>
#include <random>

#include "data/shard.h"
#include "test/data/data_test_util.h"
#include "test/support/catch.h"

using namespace nmt;
using nmt::test::contains;
using nmt::test::error_of;
using nmt::test::ScratchDir;

namespace {

std::vector<std::vector<int32_t>> random_sentences(int64_t count, int64_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::vector<int32_t>> sentences(count);
  for (auto& s : sentences) {
    s.resize(rng() % 40);  // includes empty sentences
    for (auto& id : s) id = static_cast<int32_t>(rng() % vocab);
  }
  return sentences;
}

void write_shard(const std::string& path, const std::vector<std::vector<int32_t>>& sentences,
                 int64_t vocab, uint64_t fingerprint = 42) {
  ShardWriter writer(path, vocab, fingerprint);
  for (const auto& s : sentences) writer.add(s);
  writer.finish();
}

// Rewrites bytes of a file in place.
void patch(const std::string& path, uint64_t offset, const void* bytes, size_t count) {
  std::string data = nmt::test::read_text(path);
  std::memcpy(data.data() + offset, bytes, count);
  nmt::test::write_text(path, data);
}

void resize_file(const std::string& path, uint64_t size) {
  std::filesystem::resize_file(path, size);
}

}  // namespace

TEST_CASE("shard round trip with uint16 and uint32 ids", "[shard]") {
  const int64_t vocab = GENERATE(int64_t{1000}, int64_t{65535}, int64_t{65536}, int64_t{200000});
  ScratchDir dir;
  const auto sentences = random_sentences(500, vocab, 7);
  write_shard(dir.file("a.shard"), sentences, vocab, 0x1234);

  Shard shard(dir.file("a.shard"));
  REQUIRE(shard.sentences() == 500);
  REQUIRE(shard.vocab_size() == vocab);
  REQUIRE(shard.vocab_fingerprint() == 0x1234);
  REQUIRE(shard.header().id_bytes == (vocab <= 65535 ? 2u : 4u));
  int64_t tokens = 0;
  std::vector<int32_t> ids;
  for (int64_t i = 0; i < 500; ++i) {
    shard.sentence(i, ids);
    REQUIRE(ids == sentences[i]);
    REQUIRE(shard.length(i) == static_cast<int32_t>(sentences[i].size()));
    tokens += shard.length(i);
  }
  REQUIRE(shard.tokens() == tokens);
  REQUIRE(shard.file_bytes() == std::filesystem::file_size(dir.file("a.shard")));
}

TEST_CASE("shard ids at the top of the uint32 range survive", "[shard]") {
  ScratchDir dir;
  const std::vector<std::vector<int32_t>> sentences = {{0, 65535, 65536, 199999}, {}};
  write_shard(dir.file("b.shard"), sentences, 200000);
  Shard shard(dir.file("b.shard"));
  std::vector<int32_t> ids;
  shard.sentence(0, ids);
  REQUIRE(ids == sentences[0]);
  shard.sentence(1, ids);
  REQUIRE(ids.empty());
}

TEST_CASE("shard writer rejects ids outside the vocabulary and writes nothing unfinished",
          "[shard]") {
  ScratchDir dir;
  const std::string path = dir.file("c.shard");
  {
    ShardWriter writer(path, 100, 0);
    writer.add(std::vector<int32_t>{1, 2, 3});
    REQUIRE(contains(error_of([&] {
                       writer.add(std::vector<int32_t>{5, 100});
                     }),
                     "outside the vocabulary"));
    REQUIRE(contains(error_of([&] { writer.add(std::vector<int32_t>{-1}); }), "id -1"));
    REQUIRE_FALSE(std::filesystem::exists(path));  // nothing under the final name yet
  }
  // Destroyed without finish(): no file, no temporary left behind.
  REQUIRE(std::filesystem::is_empty(dir.path()));
}

TEST_CASE("shard open reports corrupt and truncated files by name", "[shard]") {
  ScratchDir dir;
  const std::string path = dir.file("d.shard");
  const auto sentences = random_sentences(50, 1000, 3);
  auto fresh = [&] { write_shard(path, sentences, 1000); };
  auto open_error = [&] { return error_of([&] { Shard s(path); }); };

  SECTION("bad magic") {
    fresh();
    patch(path, 0, "XXXX", 4);
    const std::string e = open_error();
    REQUIRE(contains(e, path));
    REQUIRE(contains(e, "bad magic"));
  }
  SECTION("not a shard at all") {
    nmt::test::write_text(path, "hello\n");
    REQUIRE(contains(open_error(), "bad magic"));
  }
  SECTION("empty file") {
    nmt::test::write_text(path, "");
    REQUIRE(contains(open_error(), "bad magic"));
  }
  SECTION("truncated inside the header") {
    fresh();
    resize_file(path, 40);
    REQUIRE(contains(open_error(), "truncated"));
  }
  SECTION("truncated inside the data") {
    fresh();
    const uint64_t full = std::filesystem::file_size(path);
    resize_file(path, GENERATE_COPY(uint64_t{100}, full / 2, full - 1));
    const std::string e = open_error();
    REQUIRE(contains(e, "truncated"));
    REQUIRE(contains(e, path));
  }
  SECTION("trailing data") {
    fresh();
    resize_file(path, std::filesystem::file_size(path) + 8);
    REQUIRE(contains(open_error(), "trailing data"));
  }
  SECTION("unsupported version") {
    fresh();
    const uint32_t version = 99;
    patch(path, offsetof(ShardHeader, version), &version, 4);
    const std::string e = open_error();
    REQUIRE(contains(e, "version 99"));
    REQUIRE(contains(e, path));
  }
  SECTION("header bit flip") {
    fresh();
    const uint64_t sentences_count = 49;
    patch(path, offsetof(ShardHeader, sentence_count), &sentences_count, 8);
    REQUIRE(contains(open_error(), "checksum"));
  }
  SECTION("id beyond the vocabulary") {
    fresh();
    const uint16_t bad = 5000;
    patch(path, kShardHeaderBytes + 2, &bad, 2);
    REQUIRE(contains(open_error(), "corrupt ids"));
    REQUIRE_NOTHROW(Shard(path, /*check_ids=*/false));
  }
  SECTION("offsets out of order") {
    fresh();
    Shard good(path);
    const uint64_t offsets_at = good.header().offsets_position;
    const uint64_t huge = good.tokens() + 5;
    patch(path, offsets_at + 8 * 10, &huge, 8);
    REQUIRE(contains(open_error(), "corrupt offsets"));
  }
  SECTION("missing file") {
    REQUIRE(contains(open_error(), "cannot open " + path));
  }
}

TEST_CASE("shard corpus pairs two shards and checks they match", "[shard]") {
  ScratchDir dir;
  const auto src = random_sentences(30, 500, 1);
  const auto tgt = random_sentences(30, 500, 2);
  write_shard(dir.file("s"), src, 500, 9);
  write_shard(dir.file("t"), tgt, 500, 9);
  ShardCorpus corpus(dir.file("s"), dir.file("t"));
  REQUIRE(corpus.size() == 30);
  std::vector<int32_t> ids;
  corpus.target(7, ids);
  REQUIRE(ids == tgt[7]);
  REQUIRE(corpus.source_length(3) == static_cast<int32_t>(src[3].size()));

  write_shard(dir.file("short"), random_sentences(29, 500, 3), 500, 9);
  const std::string e = error_of([&] { ShardCorpus c(dir.file("s"), dir.file("short")); });
  REQUIRE(contains(e, "30 sentences"));
  REQUIRE(contains(e, "has 29"));
  REQUIRE(contains(e, dir.file("short")));

  write_shard(dir.file("other"), tgt, 500, 10);
  REQUIRE(contains(error_of([&] { ShardCorpus c(dir.file("s"), dir.file("other")); }),
                   "different vocabularies"));
}
