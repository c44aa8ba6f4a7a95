// OpenSeq2Seq-style vocabulary files and pre-tokenized text.
#include "data/os2s.h"
#include "test/data/data_test_util.h"
#include "test/support/catch.h"

using namespace nmt;
using nmt::test::contains;
using nmt::test::error_of;
using nmt::test::ScratchDir;
using nmt::test::write_text;

namespace {

// The layout of OpenSeq2Seq's m_common.vocab: a SentencePiece .vocab file trained with
// pad=0 eos=1 bos=2 unk=3, "piece<TAB>score" per line.
const char* const kOpenSeq2SeqVocab =
    "<pad>\t0\n</s>\t0\n<s>\t0\n<unk>\t0\n"
    "\u2581the\t-0\n\u2581cat\t-1\ns\t-2\n\u2581sat\t-3\n.\t-4\n";

}  // namespace

TEST_CASE("OpenSeq2Seq vocabulary: special lines map to our fixed ids, pieces follow", "[os2s]") {
  ScratchDir dir;
  write_text(dir.file("m_common.vocab"), kOpenSeq2SeqVocab);
  const PieceListVocab vocab = PieceListVocab::load(dir.file("m_common.vocab"));
  REQUIRE(vocab.size() == 9);
  REQUIRE(vocab.special_lines() == 4);
  REQUIRE(vocab.piece(kPadId) == "<pad>");
  REQUIRE(vocab.piece(kUnkId) == "<unk>");
  REQUIRE(vocab.piece(kBosId) == "<s>");
  REQUIRE(vocab.piece(kEosId) == "</s>");
  REQUIRE(vocab.piece_id("\u2581the") == 4);
  REQUIRE(vocab.piece_id(".") == 8);
  REQUIRE(vocab.piece_id("\u2581dog") == kUnkId);

  std::vector<int32_t> ids;
  vocab.encode("\u2581the \u2581cat s  \u2581sat \u2581dog .", ids);
  REQUIRE(ids == std::vector<int32_t>{4, 5, 6, 7, kUnkId, 8});
  const std::vector<int32_t> sentence = {kBosId, 4, 5, 6, 7, 8, kEosId, kPadId};
  REQUIRE(vocab.decode(sentence) == "the cats sat.");
}

TEST_CASE("piece list: counts after a space, our own file reads back to the same ids", "[os2s]") {
  ScratchDir dir;
  write_text(dir.file("v"), "hello 120\nwor@@ 7\nld\n\n<UNK> 3\n<S>\n</S>\n<PAD>\n");
  const PieceListVocab vocab = PieceListVocab::load(dir.file("v"));
  REQUIRE(vocab.size() == 7);
  REQUIRE(vocab.special_lines() == 4);
  REQUIRE(vocab.piece_id("hello") == 4);
  REQUIRE(vocab.piece_id("ld") == 6);
  const std::vector<int32_t> ids = {4, 5, 6};
  REQUIRE(vocab.decode(ids) == "hello world");  // subword-nmt "@@ " continuation

  write_text(dir.file("ours"), vocab.to_text());
  const PieceListVocab again = PieceListVocab::load(dir.file("ours"));
  REQUIRE(again.size() == vocab.size());
  REQUIRE(again.fingerprint() == vocab.fingerprint());
  for (int32_t id = 0; id < vocab.size(); ++id) REQUIRE(again.piece(id) == vocab.piece(id));
}

TEST_CASE("piece list errors name the file and line", "[os2s]") {
  ScratchDir dir;
  write_text(dir.file("dup"), "a\nb\na\n");
  const std::string e = error_of([&] { PieceListVocab::load(dir.file("dup")); });
  REQUIRE(contains(e, dir.file("dup") + ":3"));
  REQUIRE(contains(e, "line 1"));
  write_text(dir.file("sep"), "a\n\tb\n");
  REQUIRE(
      contains(error_of([&] { PieceListVocab::load(dir.file("sep")); }), dir.file("sep") + ":2"));
  write_text(dir.file("none"), "<pad>\n<unk>\n");
  REQUIRE(contains(error_of([&] { PieceListVocab::load(dir.file("none")); }), "no pieces"));
}

TEST_CASE("load_vocab picks the kind by file name", "[os2s]") {
  ScratchDir dir;
  write_text(dir.file("m_common.vocab"), kOpenSeq2SeqVocab);
  REQUIRE(load_vocab(dir.file("m_common.vocab"))->kind() == "pieces");
  write_text(dir.file("bad.model"), "not a protobuf");
  REQUIRE(contains(error_of([&] { load_vocab(dir.file("bad.model")); }), dir.file("bad.model")));
}
