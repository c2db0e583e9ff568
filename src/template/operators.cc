// Python's operators on template values: arithmetic, concatenation, membership, slicing and the
// two string formatting mini-languages (printf-style % and str.format).
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <optional>

#include "template/builtins.h"
#include "template/error.h"
#include "template/evaluator.h"
#include "template/unicode.h"

namespace pagoda::tmpl {

namespace {

/// value * 10 + digit for a width or precision in a format string, saturating at 2^30 (the
/// padding limit applies later) instead of overflowing on a long run of digits.
int append_digit(int value, char digit) {
  constexpr int kMax = 1 << 30;
  if (value > (kMax - 9) / 10) return kMax;
  return value * 10 + (digit - '0');
}

[[noreturn]] void fail(const std::string& message) { throw TemplateError(message, 0); }

[[noreturn]] void unsupported(const std::string& op, const Value& a, const Value& b) {
  fail("unsupported operand type(s) for " + op + ": '" + a.type_name() + "' and '" + b.type_name() +
       "'");
}

Value repeat(Evaluator& ev, const Value& seq, int64_t times) {
  if (times <= 0)
    return seq.is_string() ? Value(std::string()) : Value::list({}, seq.list().is_tuple);
  if (seq.is_string()) {
    ev.check_size(seq.str().size() * static_cast<size_t>(times));
    std::string out;
    for (int64_t i = 0; i < times; ++i) out += seq.str();
    return Value(std::move(out));
  }
  ev.count_iterations(static_cast<int64_t>(seq.items().size()) * times);
  std::vector<Value> out;
  for (int64_t i = 0; i < times; ++i) out.insert(out.end(), seq.items().begin(), seq.items().end());
  return Value::list(std::move(out), seq.list().is_tuple);
}

double python_fmod(double a, double b) {
  double m = std::fmod(a, b);
  if (m != 0 && ((m < 0) != (b < 0))) m += b;
  return m;
}

// One %-conversion or format-spec field, Python style.
std::string format_one(const Value& v, const std::string& flags, int width, int precision,
                       char type) {
  check_pad_width(width);
  check_pad_width(precision);
  std::string body;
  char buf[512];
  switch (type) {
    case 's':
      body = to_str(v);
      if (precision >= 0 && static_cast<size_t>(precision) < body.size()) body.resize(precision);
      break;
    case 'r':
      body = to_repr(v);
      break;
    case 'c':
      if (v.is_string() && utf8_length(v.str()) == 1) {
        body = v.str();
      } else if ((v.is_int() || v.is_bool()) && v.as_int() >= 0 && v.as_int() <= 0x10FFFF) {
        utf8_append(body, static_cast<uint32_t>(v.as_int()));
      } else {
        fail("%c requires an int or a unicode character");
      }
      break;
    case 'd':
    case 'i': {
      int64_t n = 0;
      if (!v.is_number()) fail("%d format: a real number is required, not " + v.type_name());
      n = v.is_float() ? static_cast<int64_t>(v.as_double()) : v.as_int();
      body = std::to_string(n);
      if (flags.find('+') != std::string::npos && n >= 0) body = "+" + body;
      break;
    }
    case 'x':
    case 'X':
    case 'o': {
      if (!v.is_int() && !v.is_bool()) fail("%x format: an integer is required");
      const char fmt[] = {'%', 'l', 'l', type, '\0'};
      std::snprintf(buf, sizeof(buf), fmt, static_cast<long long>(v.as_int()));
      body = buf;
      break;
    }
    case 'f':
    case 'F':
    case 'e':
    case 'E':
    case 'g':
    case 'G': {
      if (!v.is_number()) fail("must be real number, not " + v.type_name());
      const char fmt[] = {'%', '.', '*', type, '\0'};
      std::snprintf(buf, sizeof(buf), fmt, precision < 0 ? 6 : precision, v.as_double());
      body = buf;
      break;
    }
    default:
      fail(std::string("unsupported format character '") + type + "'");
  }
  const size_t body_length = utf8_length(body);  // Python pads by code points
  if (width > 0 && body_length < static_cast<size_t>(width)) {
    const size_t pad = static_cast<size_t>(width) - body_length;
    if (flags.find('-') != std::string::npos) {
      body.append(pad, ' ');
    } else if (flags.find('0') != std::string::npos && type != 's' && type != 'r') {
      body.insert(body[0] == '-' || body[0] == '+' ? 1 : 0, pad, '0');
    } else {
      body.insert(0, pad, ' ');
    }
  }
  return body;
}

}  // namespace

void check_pad_width(int64_t width) {
  if (width > kMaxPadWidth) {
    fail("width " + std::to_string(width) + " exceeds the limit of " +
         std::to_string(kMaxPadWidth));
  }
}

Value binary_op(Evaluator& ev, const std::string& op, const Value& a, const Value& b) {
  if (op == "~") {
    std::string out = to_str(a);
    const std::string right = to_str(b);
    ev.check_size(out.size() + right.size());
    return Value(out + right);
  }
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  const bool numbers = a.is_number() && b.is_number();
  const bool floats = numbers && (a.is_float() || b.is_float());
  if (op == "+") {
    if (numbers) {
      if (floats) return Value(a.as_double() + b.as_double());
      int64_t r;
      if (__builtin_add_overflow(a.as_int(), b.as_int(), &r)) fail("integer overflow");
      return Value(r);
    }
    if (a.is_string()) {
      if (!b.is_string()) fail("can only concatenate str (not \"" + b.type_name() + "\") to str");
      ev.check_size(a.str().size() + b.str().size());
      if (a.is_safe() || b.is_safe()) {  // markupsafe: Markup + str escapes the str
        return Value::safe_string((a.is_safe() ? a.str() : html_escape(a.str())) +
                                  (b.is_safe() ? b.str() : html_escape(b.str())));
      }
      return Value(a.str() + b.str());
    }
    if (a.is_list() && b.is_list() && a.list().is_tuple == b.list().is_tuple &&
        !a.list().is_generator && !b.list().is_generator) {
      ev.count_iterations(static_cast<int64_t>(b.items().size()));
      std::vector<Value> out = a.items();
      out.insert(out.end(), b.items().begin(), b.items().end());
      return Value::list(std::move(out), a.list().is_tuple);
    }
    if (a.is_list()) {
      fail("can only concatenate " + a.type_name() + " (not \"" + b.type_name() + "\") to " +
           a.type_name());
    }
    unsupported(op, a, b);
  }
  if (op == "-") {
    if (!numbers) unsupported(op, a, b);
    if (floats) return Value(a.as_double() - b.as_double());
    int64_t r;
    if (__builtin_sub_overflow(a.as_int(), b.as_int(), &r)) fail("integer overflow");
    return Value(r);
  }
  if (op == "*") {
    if (numbers) {
      if (floats) return Value(a.as_double() * b.as_double());
      int64_t r;
      if (__builtin_mul_overflow(a.as_int(), b.as_int(), &r)) fail("integer overflow");
      return Value(r);
    }
    if ((a.is_string() || a.is_list()) && (b.is_int() || b.is_bool()))
      return repeat(ev, a, b.as_int());
    if ((b.is_string() || b.is_list()) && (a.is_int() || a.is_bool()))
      return repeat(ev, b, a.as_int());
    unsupported(op, a, b);
  }
  if (op == "/") {
    if (!numbers) unsupported(op, a, b);
    if (b.as_double() == 0) fail("division by zero");
    return Value(a.as_double() / b.as_double());
  }
  if (op == "//") {
    if (!numbers) unsupported(op, a, b);
    if (b.as_double() == 0) fail("integer division or modulo by zero");
    if (floats) return Value(std::floor(a.as_double() / b.as_double()));
    const int64_t x = a.as_int(), y = b.as_int();
    if (x == INT64_MIN && y == -1) fail("integer overflow");
    int64_t q = x / y;
    if ((x % y != 0) && ((x < 0) != (y < 0))) --q;
    return Value(q);
  }
  if (op == "%") {
    if (a.is_string()) return Value(percent_format(a.str(), b));
    if (!numbers) unsupported(op, a, b);
    if (b.as_double() == 0) fail("integer division or modulo by zero");
    if (floats) return Value(python_fmod(a.as_double(), b.as_double()));
    const int64_t x = a.as_int(), y = b.as_int();
    if (y == -1) return Value(int64_t{0});
    int64_t m = x % y;
    if (m != 0 && ((m < 0) != (y < 0))) m += y;
    return Value(m);
  }
  if (op == "**") {
    if (!numbers) unsupported("** or pow()", a, b);
    if (!floats && b.as_int() >= 0) {
      int64_t result = 1, base = a.as_int();
      for (int64_t e = b.as_int(); e > 0; --e) {
        if (__builtin_mul_overflow(result, base, &result)) fail("integer overflow");
        if (result == 0 || result == 1) break;
      }
      return Value(result);
    }
    return Value(std::pow(a.as_double(), b.as_double()));
  }
  fail("unknown operator " + op);
}

bool contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::kUndefined:
      return false;
    case Value::Kind::kString:
      if (!item.is_string()) {
        fail("'in <string>' requires string as left operand, not " + item.type_name());
      }
      return container.str().find(item.str()) != std::string::npos;
    case Value::Kind::kList:
      for (const auto& v : container.items()) {
        if (values_equal(v, item)) return true;
      }
      return false;
    case Value::Kind::kDict:
      return container.dict().find(item) != nullptr;
    default:
      fail("argument of type '" + container.type_name() + "' is not iterable");
  }
}

Value slice_value(const Value& obj, const Value& start_v, const Value& stop_v,
                  const Value& step_v) {
  auto to_index = [](const Value& v, const char* what) -> std::optional<int64_t> {
    if (v.is_none() || v.is_undefined()) return std::nullopt;
    if (!v.is_int() && !v.is_bool()) fail(std::string("slice ") + what + " must be an integer");
    return v.as_int();
  };
  std::vector<std::string> chars;
  if (obj.is_string()) {
    chars = utf8_chars(obj.str());
  } else if (!obj.is_list()) {
    fail("'" + obj.type_name() + "' object is not subscriptable");
  }
  const int64_t len = obj.is_string() ? static_cast<int64_t>(chars.size())
                                      : static_cast<int64_t>(obj.items().size());
  const int64_t step = to_index(step_v, "step").value_or(1);
  if (step == 0) fail("slice step cannot be zero");
  auto clamp = [&](std::optional<int64_t> v, int64_t fallback) {
    if (!v) return fallback;
    int64_t i = *v < 0 ? *v + len : *v;
    if (step > 0) return std::clamp<int64_t>(i, 0, len);
    return std::clamp<int64_t>(i, -1, len - 1);
  };
  const int64_t start = clamp(to_index(start_v, "start"), step > 0 ? 0 : len - 1);
  const int64_t stop = clamp(to_index(stop_v, "stop"), step > 0 ? len : -1);
  std::vector<int64_t> picks;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) picks.push_back(i);
  if (obj.is_string()) {
    std::string out;
    for (int64_t i : picks) out += chars[static_cast<size_t>(i)];
    return Value(std::move(out));
  }
  std::vector<Value> out;
  for (int64_t i : picks) out.push_back(obj.items()[static_cast<size_t>(i)]);
  return Value::list(std::move(out), obj.list().is_tuple);
}

std::string percent_format(const std::string& fmt, const Value& args) {
  std::vector<Value> positional;
  if (args.is_list() && args.list().is_tuple) {
    positional = args.items();
  } else {
    positional.push_back(args);
  }
  size_t next_arg = 0;
  std::string out;
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%') {
      out += fmt[i];
      continue;
    }
    if (++i >= fmt.size()) fail("incomplete format");
    if (fmt[i] == '%') {
      out += '%';
      continue;
    }
    const Value* arg = nullptr;
    if (fmt[i] == '(') {
      const size_t close = fmt.find(')', i);
      if (close == std::string::npos) fail("incomplete format key");
      if (!args.is_dict()) fail("format requires a mapping");
      arg = args.dict().find(fmt.substr(i + 1, close - i - 1));
      if (arg == nullptr) fail("KeyError: '" + fmt.substr(i + 1, close - i - 1) + "'");
      i = close + 1;
    }
    std::string flags;
    while (i < fmt.size() && std::string_view("-+ #0").find(fmt[i]) != std::string_view::npos) {
      flags += fmt[i++];
    }
    int width = 0, precision = -1;
    while (i < fmt.size() && std::isdigit(static_cast<unsigned char>(fmt[i]))) {
      width = append_digit(width, fmt[i++]);
    }
    if (i < fmt.size() && fmt[i] == '.') {
      precision = 0;
      ++i;
      while (i < fmt.size() && std::isdigit(static_cast<unsigned char>(fmt[i]))) {
        precision = append_digit(precision, fmt[i++]);
      }
    }
    if (i >= fmt.size()) fail("incomplete format");
    if (arg == nullptr) {
      if (next_arg >= positional.size()) fail("not enough arguments for format string");
      arg = &positional[next_arg++];
    }
    out += format_one(*arg, flags, width, precision, fmt[i]);
  }
  if (!args.is_dict() && next_arg < positional.size()) {
    fail("not all arguments converted during string formatting");
  }
  return out;
}

std::string brace_format(const std::string& fmt, const CallArgs& args) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    const char c = fmt[i];
    if (c == '}') {
      if (i + 1 < fmt.size() && fmt[i + 1] == '}') ++i;
      out += '}';
      continue;
    }
    if (c != '{') {
      out += c;
      continue;
    }
    if (i + 1 < fmt.size() && fmt[i + 1] == '{') {
      out += '{';
      ++i;
      continue;
    }
    const size_t close = fmt.find('}', i);
    if (close == std::string::npos) fail("Single '{' encountered in format string");
    std::string field = fmt.substr(i + 1, close - i - 1);
    i = close;
    std::string spec;
    char conversion = 0;
    if (const size_t colon = field.find(':'); colon != std::string::npos) {
      spec = field.substr(colon + 1);
      field.resize(colon);
    }
    if (const size_t bang = field.find('!'); bang != std::string::npos) {
      conversion = bang + 1 < field.size() ? field[bang + 1] : 's';
      field.resize(bang);
    }
    const Value* arg = nullptr;
    if (field.empty() || std::isdigit(static_cast<unsigned char>(field[0]))) {
      size_t index = auto_index;
      if (field.empty()) {
        ++auto_index;
      } else {
        // Hand-parsed: std::stoul throws std::out_of_range on long digit runs.
        index = 0;
        for (const char d : field) {
          if (!std::isdigit(static_cast<unsigned char>(d)) || index > 1000000) {
            fail("Replacement index '" + field + "' is not a small integer");
          }
          index = index * 10 + static_cast<size_t>(d - '0');
        }
      }
      if (index >= args.args.size())
        fail("Replacement index " + std::to_string(index) + " out of range");
      arg = &args.args[index];
    } else {
      for (const auto& [key, value] : args.kwargs) {
        if (key == field) arg = &value;
      }
      if (arg == nullptr) fail("KeyError: '" + field + "'");
    }
    if (spec.empty()) {
      out += conversion == 'r' ? to_repr(*arg) : to_str(*arg);
      continue;
    }
    // A subset of the format-spec language: [[fill]align][0][width][.precision][type].
    std::string flags;
    size_t p = 0;
    char align = 0;
    std::string fill = " ";
    auto is_align = [](char c) { return c == '<' || c == '>' || c == '^'; };
    if (spec.size() >= 2 && is_align(spec[1]) && !is_align(spec[0])) {
      fill = spec.substr(0, 1);
      align = spec[1];
      p = 2;
    } else if (!spec.empty() && is_align(spec[0])) {
      align = spec[0];
      p = 1;
    }
    if (p < spec.size() && spec[p] == '0') flags += spec[p++];
    int width = 0, precision = -1;
    while (p < spec.size() && std::isdigit(static_cast<unsigned char>(spec[p]))) {
      width = append_digit(width, spec[p++]);
    }
    if (p < spec.size() && spec[p] == '.') {
      precision = 0;
      ++p;
      while (p < spec.size() && std::isdigit(static_cast<unsigned char>(spec[p]))) {
        precision = append_digit(precision, spec[p++]);
      }
    }
    char type = p < spec.size() ? spec[p] : (arg->is_float() && precision >= 0 ? 'f' : 's');
    check_pad_width(width);
    std::string body = format_one(*arg, align == 0 ? flags : "", 0, precision, type);
    if (align == 0 && !arg->is_string()) {
      body = format_one(*arg, flags, width, precision, type);
    } else {
      const int64_t pad = width - static_cast<int64_t>(utf8_length(body));
      if (pad > 0) {
        const char how = align != 0 ? align : '<';  // strings align left by default
        const int64_t left = how == '<' ? 0 : how == '>' ? pad : pad / 2;
        std::string padded;
        for (int64_t k = 0; k < left; ++k) padded += fill;
        padded += body;
        for (int64_t k = left; k < pad; ++k) padded += fill;
        body = std::move(padded);
      }
    }
    out += body;
  }
  return out;
}

}  // namespace pagoda::tmpl
