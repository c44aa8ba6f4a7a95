// The cross-key rules of the config schema: each a doc line for docs/config.md and a check that
// returns the violation message naming every key involved and its value.
#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "engine/config/config_schema.h"

namespace nmt {
namespace {

// The synthetic tasks the data layer generates ("synthetic:<task>").
const std::vector<std::string> kSyntheticTasks = {"reverse"};

std::string str(int64_t value) {
  return std::to_string(value);
}

std::vector<CrossKeyRule> build_rules() {
  std::vector<CrossKeyRule> rules;
  auto rule = [&rules](std::string doc, std::function<std::string(const RunConfig&)> check) {
    rules.push_back({std::move(doc), std::move(check)});
  };
  rule("model.d_model is a multiple of model.num_heads.", [](const RunConfig& c) {
    if (c.model.d_model % c.model.num_heads == 0) return std::string();
    return "model.d_model (" + str(c.model.d_model) + ") must be divisible by model.num_heads (" +
           str(c.model.num_heads) + ")";
  });
  rule(
      "model.max_positions covers data.max_src_len and data.max_tgt_len + 1 (the decoder's "
      "BOS/EOS position).",
      [](const RunConfig& c) {
        const int64_t needed = std::max(c.data.max_src_len, c.data.max_tgt_len + 1);
        if (c.model.max_positions >= needed) return std::string();
        return "model.max_positions (" + str(c.model.max_positions) +
               ") must be at least max(data.max_src_len, data.max_tgt_len + 1) = " + str(needed);
      });
  rule("data.train is not empty; `synthetic:<task>` names a known task (" + kSyntheticTasks[0] +
           ").",
       [](const RunConfig& c) {
         if (c.data.train.empty()) {
           return std::string(
               "data.train is empty: set it to synthetic:reverse or a directory written by "
               "nmt-prep");
         }
         if (!c.data.train_is_synthetic()) return std::string();
         for (const std::string& task : kSyntheticTasks) {
           if (c.data.synthetic_task() == task) return std::string();
         }
         std::string known;
         for (const std::string& task : kSyntheticTasks)
           known += (known.empty() ? "" : ", ") + task;
         return "data.train = \"" + c.data.train +
                "\" names an unknown synthetic task (known: " + known + ")";
       });
  rule("A synthetic data.train brings its own dev set: data.dev stays empty.",
       [](const RunConfig& c) {
         if (!c.data.train_is_synthetic() || c.data.dev.empty()) return std::string();
         return "data.dev must be empty when data.train is synthetic (the task generates "
                "data.synthetic_dev_pairs dev pairs), got \"" +
                c.data.dev + "\"";
       });
  rule(
      "data.synthetic_min_len <= data.synthetic_max_len, and for a synthetic data.train "
      "data.synthetic_max_len fits data.max_src_len and data.max_tgt_len.",
      [](const RunConfig& c) {
        const DataConfig& d = c.data;
        if (d.synthetic_min_len > d.synthetic_max_len) {
          return "data.synthetic_min_len (" + str(d.synthetic_min_len) +
                 ") must not exceed data.synthetic_max_len (" + str(d.synthetic_max_len) + ")";
        }
        if (d.train_is_synthetic() &&
            d.synthetic_max_len > std::min(d.max_src_len, d.max_tgt_len)) {
          return "data.synthetic_max_len (" + str(d.synthetic_max_len) +
                 ") must fit data.max_src_len (" + str(d.max_src_len) + ") and data.max_tgt_len (" +
                 str(d.max_tgt_len) + ")";
        }
        return std::string();
      });
  rule(
      "train.batch_tokens holds the longest allowed pair: at least max(data.max_src_len, "
      "data.max_tgt_len + 1).",
      [](const RunConfig& c) {
        const int64_t needed = std::max(c.data.max_src_len, c.data.max_tgt_len + 1);
        if (c.train.batch_tokens >= needed) return std::string();
        return "train.batch_tokens (" + str(c.train.batch_tokens) +
               ") must hold the longest allowed pair: at least max(data.max_src_len, "
               "data.max_tgt_len + 1) = " +
               str(needed);
      });
  rule("train.max_time is \"\", whole seconds, H:MM:SS or D-HH:MM:SS, and not 0.",
       [](const RunConfig& c) {
         if (c.train.max_time.empty() || parse_max_time(c.train.max_time)) return std::string();
         return "train.max_time = \"" + c.train.max_time +
                "\" is not a time limit: expected seconds (\"5400\"), \"H:MM:SS\" (\"1:30:00\") "
                "or \"D-HH:MM:SS\" (\"2-00:00:00\"), or \"\" for none";
       });
  rule("lr_schedule.policy transformer_policy and inverse_sqrt need lr_schedule.warmup_steps >= 1.",
       [](const RunConfig& c) {
         if (c.lr_schedule.policy == LrPolicy::constant || c.lr_schedule.warmup_steps >= 1) {
           return std::string();
         }
         return "lr_schedule.policy = " + std::string(config_name(c.lr_schedule.policy)) +
                " needs lr_schedule.warmup_steps >= 1 (its formula divides by it), got 0";
       });
  rule(
      "lr_schedule.policy cosine and linear need a decay end (lr_schedule.decay_steps, else "
      "train.max_steps) after lr_schedule.warmup_steps, and lr_schedule.final_lr <= "
      "lr_schedule.learning_rate.",
      [](const RunConfig& c) {
        const LrScheduleConfig& l = c.lr_schedule;
        if (l.policy != LrPolicy::cosine && l.policy != LrPolicy::linear) return std::string();
        const int64_t end = decay_end(l, c.train.max_steps);
        if (end <= l.warmup_steps)
          return "lr_schedule.policy = " + std::string(config_name(l.policy)) +
                 " decays until step " + std::to_string(end) +
                 (l.decay_steps == 0 ? " (train.max_steps)" : " (lr_schedule.decay_steps)") +
                 ", which is not after lr_schedule.warmup_steps = " +
                 std::to_string(l.warmup_steps);
        if (l.final_lr > l.learning_rate)
          return "lr_schedule.final_lr = " + std::to_string(l.final_lr) +
                 " is above lr_schedule.learning_rate = " + std::to_string(l.learning_rate) +
                 ": the decay would rise";
        return std::string();
      });
  rule("eval.every_steps > 0 needs data.dev, unless data.train is synthetic.",
       [](const RunConfig& c) {
         if (c.eval.every_steps == 0 || !c.data.dev.empty() || c.data.train_is_synthetic()) {
           return std::string();
         }
         return "eval.every_steps = " + str(c.eval.every_steps) +
                " needs a dev set: set data.dev (only a synthetic data.train brings its own)";
       });
  rule("eval.early_stop_patience > 0 needs eval.every_steps > 0.", [](const RunConfig& c) {
    if (c.eval.early_stop_patience == 0 || c.eval.every_steps > 0) return std::string();
    return "eval.early_stop_patience = " + str(c.eval.early_stop_patience) +
           " needs eval.every_steps > 0 (there are no evaluations to be patient with)";
  });
  rule("checkpoint.every_steps > 0 needs checkpoint.dir.", [](const RunConfig& c) {
    if (c.checkpoint.every_steps == 0 || !c.checkpoint.dir.empty()) return std::string();
    return "checkpoint.every_steps = " + str(c.checkpoint.every_steps) +
           " needs checkpoint.dir (where to write them)";
  });
  return rules;
}

}  // namespace

const std::vector<CrossKeyRule>& cross_key_rules() {
  static const std::vector<CrossKeyRule> rules = build_rules();
  return rules;
}

}  // namespace nmt
