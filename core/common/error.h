#pragma once
// Typed errors for everything a user can get wrong. Each names the subject (usually a file), the
// item inside it (a tensor, a config field) and what to do, so a message stands on its own.
#include <stdexcept>
#include <string>

namespace mosaic {

class Error : public std::runtime_error {
 public:
  Error(std::string subject, std::string item, std::string problem, std::string hint = {});

  const std::string& subject() const noexcept { return subject_; }  // file or object at fault
  const std::string& item() const noexcept { return item_; }        // tensor, field, … ("" if none)
  const std::string& problem() const noexcept { return problem_; }
  const std::string& hint() const noexcept { return hint_; }

 private:
  std::string subject_, item_, problem_, hint_;
};

// A file that cannot be opened, read or written.
class IoError : public Error { using Error::Error; };
// A file whose contents break its format: safetensors layout, JSON syntax, layout schema.
class FormatError : public Error { using Error::Error; };
// Valid input that names something Mosaic does not implement (a model_type, rope scaling, …).
class UnsupportedError : public Error { using Error::Error; };
// Pieces that must agree and do not: variants of a family, a checkpoint and its config.
class MismatchError : public Error { using Error::Error; };
// A required piece is absent: a tensor, a config field, a file of a checkpoint.
class MissingError : public Error { using Error::Error; };
// A memory budget too small for what must be resident.
class BudgetError : public Error { using Error::Error; };
// The GPU is absent or failed: no device, a driver error, out of device memory.
class DeviceError : public Error { using Error::Error; };
// A request the caller made that cannot be served as asked (ids out of range, too many tokens).
class InvalidArgument : public Error { using Error::Error; };

}  // namespace mosaic
