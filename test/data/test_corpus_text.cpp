// Raw text readers: UTF-8 validation and repair, line splitting, the alignment check.
#include "data/corpus_text.h"
#include "test/data/data_test_util.h"
#include "test/support/catch.h"

using namespace nmt;
using nmt::test::contains;
using nmt::test::error_of;
using nmt::test::ScratchDir;
using nmt::test::write_text;

TEST_CASE("utf-8 validation accepts well-formed text and rejects every ill-formed kind",
          "[corpus]") {
  REQUIRE(is_valid_utf8(""));
  REQUIRE(is_valid_utf8("plain ascii text, long enough for the eight-byte path"));
  REQUIRE(is_valid_utf8("caf\xC3\xA9 \xE2\x82\xAC \xF0\x9D\x84\x9E"));  // é € 𝄞
  REQUIRE(is_valid_utf8("\xED\x9F\xBF"));                               // U+D7FF
  REQUIRE(is_valid_utf8("\xF4\x8F\xBF\xBF"));                           // U+10FFFF

  REQUIRE_FALSE(is_valid_utf8("\xC3"));              // truncated
  REQUIRE_FALSE(is_valid_utf8("\xC0\xAF"));          // overlong '/'
  REQUIRE_FALSE(is_valid_utf8("\xE0\x80\xAF"));      // overlong
  REQUIRE_FALSE(is_valid_utf8("\xED\xA0\x80"));      // surrogate
  REQUIRE_FALSE(is_valid_utf8("\xF4\x90\x80\x80"));  // above U+10FFFF
  REQUIRE_FALSE(is_valid_utf8("\xFF"));
  REQUIRE_FALSE(is_valid_utf8("\x80"));                                   // lone continuation
  REQUIRE_FALSE(is_valid_utf8("abcdefghijklm\xE9nopqrstuvwxyz0123456"));  // Latin-1 é mid-run
}

TEST_CASE("utf-8 repair replaces ill-formed bytes with U+FFFD", "[corpus]") {
  REQUIRE(repair_utf8("ok") == "ok");
  REQUIRE(repair_utf8("a\xFF"
                      "b") ==
          "a\xEF\xBF\xBD"
          "b");
  REQUIRE(repair_utf8("caf\xE9") == "caf\xEF\xBF\xBD");
  REQUIRE(is_valid_utf8(repair_utf8("\xC3\x28\xF0\x28\x8C\x28")));
}

TEST_CASE("text lines: CRLF, byte order mark, missing final newline, empty file", "[corpus]") {
  ScratchDir dir;
  write_text(dir.file("a"), "\xEF\xBB\xBFone\r\ntwo\n\nfour");
  TextLines lines(dir.file("a"));
  REQUIRE(lines.line_count() == 4);
  std::vector<std::string> seen;
  auto cursor = lines.cursor();
  std::string_view line;
  while (cursor.next(line)) seen.emplace_back(line);
  REQUIRE(seen == std::vector<std::string>{"one", "two", "", "four"});
  REQUIRE(cursor.line_number() == 4);

  write_text(dir.file("empty"), "");
  TextLines empty(dir.file("empty"));
  REQUIRE(empty.line_count() == 0);
  auto c = empty.cursor();
  REQUIRE_FALSE(c.next(line));

  write_text(dir.file("b"), "x\ny\n");
  REQUIRE(TextLines(dir.file("b")).line_count() == 2);
  REQUIRE(is_blank(" \t "));
  REQUIRE_FALSE(is_blank(" a "));
}

TEST_CASE("misaligned files: the error names both files and both counts", "[corpus]") {
  ScratchDir dir;
  write_text(dir.file("src.txt"), "a\nb\nc\n");
  write_text(dir.file("tgt.txt"), "a\nb\n");
  const std::string e = error_of([&] {
    require_same_line_count(TextLines(dir.file("src.txt")), TextLines(dir.file("tgt.txt")));
  });
  REQUIRE(contains(e, dir.file("src.txt") + " has 3 lines"));
  REQUIRE(contains(e, dir.file("tgt.txt") + " has 2 lines"));
  REQUIRE(contains(error_of([&] { TextLines t(dir.file("missing")); }), dir.file("missing")));
}
