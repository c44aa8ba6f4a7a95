// BLEU/chrF behaviour that needs no oracle: UTF-8 validation, input errors, file reading rules,
// signatures, hand-checked scores and Python's lowercasing special cases.
#include <omp.h>

#include <cmath>
#include <fstream>
#include <functional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "data/bleu.h"
#include "data/bleu_io.h"
#include "data/bleu_lines.h"
#include "data/bleu_text.h"
#include "data/chrf.h"
#include "test/bleu/oracle.h"
#include "test/support/catch.h"
#include "version/provenance.h"

namespace {

namespace text = nmt::bleu_text;
using Lines = std::vector<std::string>;

std::string lower_utf8(const std::string& line) {
  return text::encode_utf8(text::python_lower(text::decode_utf8(line, "test")));
}

std::string what_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const std::exception& error) {
    return error.what();
  }
  return "(no exception)";
}

std::string write_scratch_file(const std::string& name, const std::string& bytes) {
  static const std::string dir = nmt::test::make_scratch_dir("nmt-bleu-unit");
  const std::string path = dir + "/" + name;
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

// OpenMP's thread count for a scope.
class OmpThreads {
 public:
  explicit OmpThreads(int threads) : before_(omp_get_max_threads()) {
    omp_set_num_threads(threads);
  }
  ~OmpThreads() { omp_set_num_threads(before_); }
  OmpThreads(const OmpThreads&) = delete;
  OmpThreads& operator=(const OmpThreads&) = delete;

 private:
  int before_;
};

}  // namespace

TEST_CASE("UTF-8 decoding rejects what Python's strict decoder rejects") {
  std::u32string decoded;
  size_t bad_offset = 0;
  CHECK(text::try_decode_utf8("a\xC3\xA9\xE2\x80\x94\xF0\x9F\x98\x80", decoded, bad_offset));
  CHECK(decoded == U"a\u00E9\u2014\U0001F600");
  CHECK(text::encode_utf8(decoded) == "a\xC3\xA9\xE2\x80\x94\xF0\x9F\x98\x80");
  const std::vector<std::string> invalid = {
      "\x80",              // lone continuation byte
      "\xC0\x80",          // overlong NUL
      "\xE0\x80\xAF",      // overlong '/'
      "\xED\xA0\x80",      // surrogate U+D800
      "\xF4\x90\x80\x80",  // above U+10FFFF
      "\xF5\x80\x80\x80",  // invalid lead byte
      "\xE2\x82",          // truncated
      "\xC3\x28",          // bad continuation
  };
  for (const std::string& bytes : invalid) {
    INFO("bytes of size " << bytes.size());
    CHECK_FALSE(text::try_decode_utf8("ok " + bytes, decoded, bad_offset));
    CHECK(bad_offset == 3);
  }
}

TEST_CASE("Python lowercasing: final sigma, dotted capital I, non-ASCII letters") {
  CHECK(lower_utf8("ΟΔΟΣ ΣΑΣ Σ") == "οδος σας σ");
  CHECK(lower_utf8("ΑΣ'") == "ας'");    // apostrophe is case-ignorable: still final
  CHECK(lower_utf8("ΑΣ'Α") == "ασ'α");  // a cased letter follows across the apostrophe
  CHECK(lower_utf8("İ") == "i\xCC\x87");
  CHECK(lower_utf8("ÀÉÎÕÜ ǅ Ω ẞ Ⅻ Ａ") == "àéîõü ǆ ω ß ⅻ ａ");
}

TEST_CASE("the signatures name our tool and the sacreBLEU release it reproduces") {
  CHECK(nmt::metric_signature_version() ==
        std::string("nmt-bleu ") + nmt::project_version() + " (sacreBLEU 2.6 compatible)");
  CHECK(std::string(nmt::kSacreBleuVersion).starts_with("2.6."));
}

TEST_CASE("corpus BLEU: hand-checked values and signatures") {
  const std::string kOurs = nmt::metric_signature_version();
  const std::vector<std::string> refs = {"The cat sat on the mat .", "Hello world"};
  const nmt::BleuStats perfect = nmt::corpus_bleu(refs, refs);
  CHECK(std::abs(perfect.score - 100.0) <= 1e-9);
  CHECK(perfect.sys_len == 9);
  CHECK(perfect.signature() == "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:" + kOurs);

  // "the cat the cat" vs "The cat sat on the mat", lowercased: unigrams clip to the x2 + cat x1
  // of 4, bigrams "the cat" x2 clip to 1 (the reference has it once), "cat the" is not there.
  nmt::BleuOptions options;
  options.lowercase = true;
  options.tokenizer = nmt::BleuTokenizer::kIntl;
  const nmt::BleuStats bleu =
      nmt::corpus_bleu(Lines{"the cat the cat"}, Lines{"The cat sat on the mat"}, options);
  CHECK(bleu.counts == std::array<int64_t, 4>{3, 1, 0, 0});
  CHECK(bleu.totals == std::array<int64_t, 4>{4, 3, 2, 1});
  CHECK(bleu.signature() == "nrefs:1|case:lc|eff:no|tok:intl|smooth:exp|version:" + kOurs);
  CHECK(nmt::sentence_bleu("a b", Lines{"a b"}).signature() ==
        "nrefs:1|case:mixed|eff:yes|tok:13a|smooth:exp|version:" + kOurs);

  const nmt::BleuStats empty = nmt::corpus_bleu(Lines{}, Lines{});
  CHECK(empty.score == 0.0);
  CHECK(empty.format() ==
        "BLEU = 0.00 0.0/0.0/0.0/0.0 (BP = 1.000 ratio = 0.000 hyp_len = 0 "
        "ref_len = 0)");
}

TEST_CASE("BLEU and chrF input errors name the problem") {
  CHECK(what_of([] {
          nmt::corpus_bleu(Lines{"a", "b"}, Lines{"a"});
        }) == "corpus_bleu: 2 hypotheses but reference set 1 has 1 lines");
  CHECK(what_of([] {
          nmt::corpus_chrf(Lines{"a"}, Lines{"a", "b"});
        }) == "corpus_chrf: 1 hypotheses but reference set 1 has 2 lines");
  CHECK(what_of([] {
          nmt::corpus_bleu(Lines{"a", "b\xFF"}, Lines{"a", "b"});
        }) == "hypothesis line 2: invalid UTF-8 at byte 2");
  CHECK(what_of([] { nmt::corpus_chrf(Lines{"a"}, Lines{"\xC3"}); }) ==
        "reference line 1: invalid UTF-8 at byte 1");
  CHECK(what_of([] { nmt::parse_bleu_tokenizer("zh"); }) ==
        "unknown BLEU tokenizer 'zh' (known: 13a, intl, none, char)");
  nmt::ChrfOptions bad;
  bad.char_order = 0;
  CHECK_THROWS_AS(nmt::corpus_chrf(Lines{"a"}, Lines{"a"}, bad), std::invalid_argument);
}

TEST_CASE("chrF: signature, name and a perfect match") {
  const std::string kOurs = nmt::metric_signature_version();
  nmt::ChrfOptions options;
  options.word_order = 2;
  const nmt::ChrfStats chrf =
      nmt::corpus_chrf(Lines{"Hello, world!"}, Lines{"Hello, world!"}, options);
  CHECK(std::abs(chrf.score - 100.0) <= 1e-9);
  CHECK(chrf.name() == "chrF2++");
  CHECK(chrf.format() == "chrF2++ = 100.00");
  CHECK(chrf.signature() == "nrefs:1|case:mixed|eff:yes|nc:6|nw:2|space:no|version:" + kOurs);
  CHECK(nmt::corpus_chrf(Lines{"abc"}, Lines{"xyz"}).score == 0.0);
}

TEST_CASE("metric files are read like sacreBLEU's command line reads them") {
  const std::string path = write_scratch_file("lines.txt", "a b  \r\n\nc\u00a0\n  d");
  CHECK(nmt::read_metric_lines(path) == Lines{"a b", "", "c", "  d"});
  CHECK(nmt::read_metric_lines(write_scratch_file("empty.txt", "")).empty());
  CHECK(nmt::read_metric_lines(write_scratch_file("newline.txt", "\n")) == Lines{""});

  const std::string bad = write_scratch_file("bad.txt", "ok\nstill ok\nnot \xE9 ok\n");
  CHECK(what_of([&] { nmt::read_metric_lines(bad); }) == bad + " line 3: invalid UTF-8 at byte 5");
  CHECK(what_of([] { nmt::read_metric_lines("/nonexistent/ref.txt"); }) ==
        "cannot open /nonexistent/ref.txt: No such file or directory");
}

TEST_CASE(
    "corpus scores are the same bits on one thread and on several; the first bad line is "
    "the one named") {
  // 700 lines: several hundred variants of a few sentences (enough for the threaded path).
  const Lines base = {"The cat sat on the mat .", "Jesus wept.", "¿Dónde está la biblioteca?",
                      "a b c d e f g", "In the beginning God created the heaven and the earth."};
  Lines hyps, refs;
  for (int i = 0; i < 700; ++i) {
    const std::string& line = base[static_cast<size_t>(i) % base.size()];
    refs.push_back(line);
    hyps.push_back(i % 3 == 0 ? line
                              : line.substr(0, line.size() - static_cast<size_t>(i % 7)) + " x" +
                                    std::to_string(i % 11));
  }
  REQUIRE(static_cast<int64_t>(hyps.size()) >= text::kParallelLines);
  auto scores = [&](int threads) {
    const OmpThreads scope(threads);
    return std::make_pair(nmt::corpus_bleu(hyps, refs), nmt::corpus_chrf(hyps, refs));
  };
  const auto [bleu1, chrf1] = scores(1);
  const auto [bleu4, chrf4] = scores(4);
  CHECK(bleu4.counts == bleu1.counts);
  CHECK(bleu4.totals == bleu1.totals);
  CHECK(bleu4.sys_len == bleu1.sys_len);
  CHECK(bleu4.ref_len == bleu1.ref_len);
  CHECK(bleu4.score == bleu1.score);
  CHECK(chrf4.stats == chrf1.stats);
  CHECK(chrf4.score == chrf1.score);
  CHECK(bleu1.score > 0);

  // Lines 301 and 512 (1-based) are not UTF-8: the error names 301 on any thread count.
  hyps[300] += "\xFF";
  refs[511] += "\xC3";
  for (int threads : {1, 4}) {
    const OmpThreads scope(threads);
    CHECK(what_of([&] { nmt::corpus_bleu(hyps, refs); }) ==
          "hypothesis line 301: invalid UTF-8 at byte " + std::to_string(hyps[300].size()));
    CHECK(what_of([&] { nmt::corpus_chrf(hyps, refs); }) ==
          "hypothesis line 301: invalid UTF-8 at byte " + std::to_string(hyps[300].size()));
  }
}
