// config_reference_markdown(): docs/config.md, written from the schema so the reference can never
// disagree with the code (test/config checks the committed file is current).
#include <string>

#include "engine/config/config.h"
#include "engine/config/config_schema.h"

namespace nmt {
namespace {

// A pipe inside a cell would end the cell.
std::string table_cell(std::string text) {
  std::string escaped;
  for (char c : text) {
    if (c == '|') escaped += '\\';
    escaped += c;
  }
  return escaped;
}

const char* const kIntroduction = R"(# Run configuration reference

<!-- Generated from engine/config/config_keys.cpp by config_reference_markdown(): do not edit by hand.
     Regenerate with: <build-dir>/test/config/test_config_schema "[regenerate-docs]" -->

A run is configured by one JSON file of sections, each an object of `key: value` pairs:

```json
{
  "model": {"d_model": 512, "num_heads": 8, "dropout": 0.1},
  "train": {"device": "cuda", "precision": "bf16", "batch_tokens": 4096}
}
```

- Every key is optional: a missing key takes the default listed below. `//` and `/* */` comments
  are allowed.
- An unknown section or key, a value of the wrong JSON type, a value out of range, a key given twice
  or broken JSON stops the run with one message naming the file, line and column or the key, the
  value and what is allowed; an unknown key comes with the closest known one ("did you mean
  model.d_model?").
- `--set section.key=value` (repeatable) overrides a key after the file is read; the value is parsed
  with the key's type: `--set train.device=cpu --set model.dropout=0.3 --set log.dir=runs/a`.
- The fully resolved config (every key) is what `--print-config` prints and what a checkpoint's
  `state.json` stores.
- Committed configs: `configs/transformer-base.json`, `configs/transformer-big.json` (the paper's
  and OpenSeq2Seq's settings) and `configs/tiny-reverse-cpu.json` (a small model on the synthetic
  reverse task, for the cpu backend).

Where OpenSeq2Seq has a name for a setting, the key uses it or its description names it.

)";

}  // namespace

std::string config_reference_markdown() {
  const RunConfig defaults;
  std::string md = kIntroduction;
  md += "Sections:";
  for (const ConfigSection& section : config_sections()) {
    md += " [" + section.name + "](#" + section.name + "),";
  }
  md += " and the [cross-key rules](#cross-key-rules).\n";

  for (const ConfigSection& section : config_sections()) {
    md += "\n## " + section.name + "\n\n" + section.doc + "\n\n";
    md += "| key | type | default | allowed | description |\n";
    md += "|---|---|---|---|---|\n";
    for (const ConfigKey& key : config_keys()) {
      if (key.section != section.name) continue;
      md += "| `" + key.path() + "` | " + describe_type(key) + " | `" +
            table_cell(format_config_value(key.get(defaults))) + "` | " +
            table_cell(describe_allowed(key)) + " | " + table_cell(key.doc) + " |\n";
    }
  }

  md += "\n## Cross-key rules\n\nChecked after the file and every `--set` are applied:\n\n";
  for (const CrossKeyRule& rule : cross_key_rules()) md += "- " + rule.doc + "\n";
  return md;
}

}  // namespace nmt
