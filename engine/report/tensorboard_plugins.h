// What TensorBoard's text and hparams plugins read: their Summary.Value messages, encoded by hand
// as TensorBoard's own summary APIs write them, and the content the trainer gives them (a Markdown
// table of sample translations, the resolved config flattened into hyperparameters).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "engine/report/tensorboard.h"

namespace nmt {

// A Markdown table with a header row "source | reference | prediction" and one row per sample
// (EvalResult::samples: {source, reference, prediction}; a short row gets empty cells, extra
// entries are dropped). Cells are escaped so that a sentence's own | \ ` * _ [ ] < & and line
// breaks show as text rather than Markdown or HTML. "" when there are no samples.
std::string samples_markdown(const std::vector<std::vector<std::string>>& samples);

// The leaves of a JSON object as hyperparameters named by their path ("model.d_model",
// "lr_schedule.learning_rate"), in key order: numbers, booleans and strings as themselves, arrays
// as their JSON text; nulls left out. A non-object gives none.
std::vector<HParam> hparams_from_json(const nlohmann::json& config);

// `text` with every invalid UTF-8 sequence replaced by U+FFFD: protobuf `string` fields and
// TensorBoard's text dashboard (which decodes the bytes strictly) need valid UTF-8.
std::string valid_utf8(std::string_view text);

namespace tensorboard_detail {
// Summary.Value {tag, metadata {plugin_data {plugin_name "text"}}, tensor {DT_STRING, shape [],
// string_val text}}.
std::string text_summary_value(const std::string& tag, const std::string& text);
// Summary.Value {tag "_hparams_/experiment", metadata {plugin_data {plugin_name "hparams",
// content HParamsPluginData {experiment}}}, tensor (empty DT_FLOAT)}.
std::string hparams_experiment_value(const std::vector<HParam>& hparams,
                                     const std::vector<std::string>& metric_tags, double wall_time);
// The same with tag "_hparams_/session_start_info" and HParamsPluginData {session_start_info}.
std::string hparams_session_start_value(const std::vector<HParam>& hparams, double wall_time);
}  // namespace tensorboard_detail

}  // namespace nmt
