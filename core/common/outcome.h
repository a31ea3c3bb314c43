#pragma once
// How long work ends (loading and analyzing a family, distances, a sweep): Ok with a value,
// Cancelled (an outcome, not an error: the caller asked for it), or Failed with the typed error
// that stopped it. Reading the value of a failed outcome rethrows that error, so code that only
// wants the value reads it and lets errors propagate as they always did.
#include <exception>
#include <stdexcept>
#include <string>
#include <utility>
#include <variant>

namespace mosaic {

struct Cancelled {};
inline constexpr Cancelled cancelled{};

template <class T = std::monostate>
class Outcome {
 public:
  Outcome(T value) : state_(std::move(value)) {}  // NOLINT: Ok converts implicitly
  Outcome(Cancelled) : state_(Cancelled{}) {}     // NOLINT
  static Outcome failed(std::exception_ptr error) { return Outcome(std::move(error)); }
  // Runs `work`, turning what it throws into a failed outcome.
  template <class F>
  static Outcome of(F&& work) {
    try {
      return std::forward<F>(work)();
    } catch (...) {
      return failed(std::current_exception());
    }
  }

  bool ok() const { return state_.index() == 0; }
  bool is_cancelled() const { return state_.index() == 1; }
  bool is_failed() const { return state_.index() == 2; }
  explicit operator bool() const { return ok(); }

  // The value; rethrows the error of a failed outcome, throws std::logic_error for a cancelled one.
  T& value() & { check(); return std::get<0>(state_); }
  const T& value() const& { check(); return std::get<0>(state_); }
  T&& value() && { check(); return std::get<0>(std::move(state_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

  void rethrow() const {
    if (is_failed()) std::rethrow_exception(std::get<2>(state_));
  }
  // The error's message ("" unless failed).
  std::string error_message() const {
    if (!is_failed()) return {};
    try {
      std::rethrow_exception(std::get<2>(state_));
    } catch (const std::exception& e) {
      return e.what();
    } catch (...) {
      return "unknown error";
    }
  }

 private:
  explicit Outcome(std::exception_ptr error) : state_(std::in_place_index<2>, std::move(error)) {}
  void check() const {
    rethrow();
    if (is_cancelled()) throw std::logic_error("the value of a cancelled outcome was read");
  }
  std::variant<T, Cancelled, std::exception_ptr> state_;
};

}  // namespace mosaic
