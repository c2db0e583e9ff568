// Structured outputs on the 128k Llama-3 vocabulary: grammar compile time (OpenAI strict-mode
// style schemas and a 100-property schema) and the token-mask cost per generated token, measured
// on valid documents tokenized by the Llama-3 tokenizer. Prints figures; not a test.
// Usage: bench_structured [tokenizers_dir] [threads]   (defaults: the repository's
// tests/data/tokenizers; 1 thread for the compile pool)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "structured/constraint.h"
#include "structured/matcher.h"
#include "structured/state_cache.h"
#include "structured/vocabulary.h"
#include "tokenizer/tokenizer.h"

namespace {

using pagoda::structured::Constraint;

// CPU time of the calling thread: the figures are per core and do not count time the scheduler
// gives to other processes (the machine may be shared). Multi-threaded compiles use wall time.
struct Clock {
  using time_point = double;
  static double now() {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
  }
};
struct WallClock {
  using time_point = double;
  static double now() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
};

double seconds_since(double t) { return Clock::now() - t; }

struct Case {
  std::string name;
  std::string schema;
  std::string document;  // a valid answer, json.dumps style
};

std::vector<Case> cases() {
  std::vector<Case> out = {
      {"math_reasoning",
       R"({"type": "object", "properties": {"steps": {"type": "array", "items": {"type": "object",
          "properties": {"explanation": {"type": "string"}, "output": {"type": "string"}},
          "required": ["explanation", "output"], "additionalProperties": false}},
          "final_answer": {"type": "string"}}, "required": ["steps", "final_answer"],
          "additionalProperties": false})",
       R"({"steps": [{"explanation": "Start with the equation 8x + 7 = -23.", "output": "8x + 7 = -23"}, {"explanation": "Subtract 7 from both sides to isolate the term with the variable.", "output": "8x = -30"}, {"explanation": "Divide both sides by 8 to solve for x.", "output": "x = -30 / 8 = -3.75"}], "final_answer": "x = -3.75"})"},
      {"paper_extraction",
       R"({"type": "object", "properties": {"title": {"type": "string"}, "authors": {"type": "array",
          "items": {"type": "string"}}, "abstract": {"type": "string"}, "keywords": {"type":
          "array", "items": {"type": "string"}}}, "required": ["title", "authors", "abstract",
          "keywords"], "additionalProperties": false})",
       R"({"title": "Application of Quantum Algorithms in Interstellar Navigation: A New Frontier", "authors": ["Dr. Stella Voyager", "Dr. Nova Star", "Dr. Lyra Hunter"], "abstract": "This paper investigates the utilization of quantum algorithms to improve interstellar navigation systems. By leveraging quantum superposition and entanglement, our proposed navigation system can calculate optimal travel paths through space-time anomalies more efficiently than classical methods.", "keywords": ["Quantum algorithms", "interstellar navigation", "space-time anomalies", "quantum superposition"]})"},
      {"ui_recursive",
       R"({"type": "object", "properties": {"ui": {"$ref": "#/$defs/ui"}}, "required": ["ui"],
          "additionalProperties": false, "$defs": {"ui": {"type": "object", "properties": {
          "type": {"type": "string", "enum": ["div", "button", "header", "section", "field",
          "form"]}, "label": {"type": "string"}, "children": {"type": "array", "items": {"$ref":
          "#/$defs/ui"}}, "attributes": {"type": "array", "items": {"type": "object",
          "properties": {"name": {"type": "string"}, "value": {"type": "string"}}, "required":
          ["name", "value"], "additionalProperties": false}}}, "required": ["type", "label",
          "children", "attributes"], "additionalProperties": false}}})",
       R"({"ui": {"type": "form", "label": "User Profile Form", "children": [{"type": "div", "label": "", "children": [{"type": "field", "label": "First Name", "children": [], "attributes": [{"name": "type", "value": "text"}, {"name": "name", "value": "firstName"}]}, {"type": "button", "label": "Submit", "children": [], "attributes": [{"name": "type", "value": "submit"}]}], "attributes": []}], "attributes": [{"name": "method", "value": "post"}]}})"},
      {"moderation",
       R"({"type": "object", "properties": {"is_violating": {"type": "boolean"}, "category":
          {"type": ["string", "null"], "enum": ["violence", "sexual", "self_harm", null]},
          "explanation_if_violating": {"type": ["string", "null"]}}, "required": ["is_violating",
          "category", "explanation_if_violating"], "additionalProperties": false})",
       R"({"is_violating": false, "category": null, "explanation_if_violating": null})"},
      {"calendar_event",
       R"({"type": "object", "properties": {"name": {"type": "string"}, "date": {"type": "string",
          "format": "date"}, "participants": {"type": "array", "items": {"type": "string"}}},
          "required": ["name", "date", "participants"], "additionalProperties": false})",
       R"({"name": "Science Fair", "date": "2026-12-04", "participants": ["Alice", "Bob"]})"},
  };
  // 100 properties of every kind, all required (as strict mode wants).
  std::string schema = R"({"type": "object", "properties": {)";
  std::string doc = "{";
  for (int i = 0; i < 100; ++i) {
    const std::string name = "field_" + std::to_string(i);
    std::string type, value;
    switch (i % 8) {
      case 0:
        type = R"({"type": "string"})", value = "\"value number " + std::to_string(i) + "\"";
        break;
      case 1:
        type = R"({"type": "integer"})", value = std::to_string(i * 37);
        break;
      case 2:
        type = R"({"type": "number"})", value = std::to_string(i) + ".5";
        break;
      case 3:
        type = R"({"type": "boolean"})", value = "true";
        break;
      case 4:
        type = R"({"type": "string", "enum": ["low", "medium", "high"]})", value = "\"medium\"";
        break;
      case 5:
        type = R"({"type": "array", "items": {"type": "string"}})", value = R"(["a", "b"])";
        break;
      case 6:
        type = R"({"type": "integer", "minimum": 0, "maximum": 1000})", value = "512";
        break;
      default:
        type = R"({"type": ["string", "null"]})", value = "null";
    }
    schema += (i ? ", \"" : "\"") + name + "\": " + type;
    doc += (i ? ", \"" : "\"") + name + "\": " + value;
  }
  schema += R"(}, "required": [)";
  for (int i = 0; i < 100; ++i)
    schema += (i ? ", \"field_" : "\"field_") + std::to_string(i) + "\"";
  schema += R"(], "additionalProperties": false})";
  doc += "}";
  out.push_back({"100_properties", schema, doc});
  return out;
}

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5)];
}

}  // namespace

int main(int argc, char** argv) {
  const std::string tokenizers =
      argc > 1 ? std::string(argv[1]) : std::string(PAGODA_SOURCE_DIR) + "/tests/data/tokenizers";
  const int threads = argc > 2 ? std::stoi(argv[2]) : 1;
  const pagoda::Tokenizer tok = pagoda::Tokenizer::load(tokenizers + "/llama3/tokenizer.json");
  auto t0 = Clock::now();
  const std::vector<int32_t> eos = tok.eos_ids();
  const auto vocab = pagoda::structured::Vocabulary::from_tokenizer(tok, 128256, eos);
  std::printf("vocabulary: %d tokens (%zu with bytes), built in %.0f ms\n", vocab->size(),
              vocab->sorted().size(), 1e3 * seconds_since(t0));
  pagoda::ThreadPool pool(threads);
  std::printf("compile threads: %d (%s time)\n\n", threads, threads > 1 ? "wall" : "thread CPU");
  // "cold": an empty state cache; "warm": one that has seen another schema before (a server's
  // usual case: the JSON primitives are shared, the schema's own structure is new).
  Constraint warm_up;
  warm_up.kind = Constraint::Kind::kJsonSchema;
  warm_up.text = R"({"type": "object", "properties": {"s": {"type": "string"}, "i": {"type":
      "integer"}, "n": {"type": "number"}, "b": {"type": "boolean"}, "a": {"type": "array",
      "items": {"type": "string"}}}, "required": ["s", "i", "n", "b", "a"]})";
  const pagoda::structured::Grammar warm_grammar = pagoda::structured::build_grammar(warm_up);
  std::printf("%-18s %8s %8s %8s %6s %7s %7s | %9s %9s %9s %9s | %9s %8s\n", "schema", "cold ms",
              "warm p50", "warm max", "fsm ms", "states", "uncert", "mean us", "p50 us", "p99 us",
              "max us", "cached us", "tokens");
  std::vector<double> all_compiles, all_masks, all_cpu_means;
  size_t all_tokens = 0;
  for (const Case& c : cases()) {
    Constraint constraint;
    constraint.kind = Constraint::Kind::kJsonSchema;
    constraint.text = c.schema;
    std::vector<double> compile_ms;
    std::shared_ptr<const pagoda::structured::CompiledGrammar> g;
    double cold_ms = 0;
    for (int run = 0; run < 8; ++run) {
      pagoda::structured::StateCache cache;
      if (run > 0) {
        (void)pagoda::structured::compile_grammar(warm_grammar, vocab,
                                                  threads > 1 ? &pool : nullptr, &cache);
      }
      const double start = threads > 1 ? WallClock::now() : Clock::now();
      g = pagoda::structured::compile_grammar(pagoda::structured::build_grammar(constraint), vocab,
                                              threads > 1 ? &pool : nullptr, &cache);
      const double end = threads > 1 ? WallClock::now() : Clock::now();
      (run == 0 ? cold_ms : compile_ms.emplace_back()) = 1e3 * (end - start);
    }
    all_compiles.insert(all_compiles.end(), compile_ms.begin(), compile_ms.end());
    const std::vector<int32_t> ids = tok.encode(c.document, false);
    // Masks computed afresh at every step, then with the matcher's cache (what serving uses).
    // Percentiles from the wall clock per call (cheap to read); means from the thread's CPU time
    // over the whole loop (its clock costs a system call per read).
    std::vector<double> mask_us;
    double cpu_mean_us = 0, cached_mean_us = 0;
    for (int cached = 0; cached < 2; ++cached) {
      pagoda::structured::GrammarMatcher m(g, cached == 1);
      std::vector<uint32_t> mask(static_cast<size_t>(vocab->mask_words()));
      double in_masks = 0;
      for (int32_t id : ids) {
        const double w0 = WallClock::now();
        m.fill_mask(mask);
        const double us = 1e6 * (WallClock::now() - w0);
        in_masks += us;
        if (!cached) mask_us.push_back(us);
        if (!m.accept_token(id)) {
          std::printf("%s: token '%s' rejected\n", c.name.c_str(),
                      std::string(vocab->bytes(id)).c_str());
          return 1;
        }
      }
      if (!m.can_end()) {
        std::printf("%s: the document is incomplete\n", c.name.c_str());
        return 1;
      }
      // The CPU time of the masks alone: the same loop's CPU time less that of accepting.
      pagoda::structured::GrammarMatcher replay(g, cached == 1);
      const double t_all = Clock::now();
      for (int32_t id : ids) {
        replay.fill_mask(mask);
        (void)replay.accept_token(id);
      }
      const double all_s = Clock::now() - t_all;
      pagoda::structured::GrammarMatcher accept_only(g, cached == 1);
      const double t_acc = Clock::now();
      for (int32_t id : ids) (void)accept_only.accept_token(id);
      const double accept_s = Clock::now() - t_acc;
      (cached ? cached_mean_us : cpu_mean_us) =
          1e6 * (all_s - accept_s) / static_cast<double>(ids.size());
      (void)in_masks;
    }
    all_masks.insert(all_masks.end(), mask_us.begin(), mask_us.end());
    const double mean = cpu_mean_us;
    all_cpu_means.push_back(cpu_mean_us * static_cast<double>(ids.size()));
    all_tokens += ids.size();
    std::printf("%-18s %8.1f %8.1f %8.1f %6.1f %7d %7lld | %9.1f %9.1f %9.1f %9.1f | %9.1f %8zu\n",
                c.name.c_str(), cold_ms, percentile(compile_ms, 0.5),
                *std::max_element(compile_ms.begin(), compile_ms.end()),
                1e3 * g->stats.automaton_seconds, g->stats.num_states,
                static_cast<long long>(g->stats.num_uncertain), mean, percentile(mask_us, 0.5),
                percentile(mask_us, 0.99), *std::max_element(mask_us.begin(), mask_us.end()),
                cached_mean_us, ids.size());
  }
  double mean = 0;
  for (double x : all_cpu_means) mean += x;
  mean /= static_cast<double>(all_tokens);
  std::printf(
      "\nall schemas: warm compile p50 %.1f ms; mask per token mean %.1f us, p50 %.1f us, p99 %.1f "
      "us\n",
      percentile(all_compiles, 0.5), mean, percentile(all_masks, 0.5), percentile(all_masks, 0.99));
  return 0;
}
