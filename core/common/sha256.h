#pragma once
// SHA-256 of bytes and of files (OpenSSL's implementation, which uses the CPU's SHA extensions).
#include <cstddef>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>

namespace mosaic {

class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  void update(std::span<const std::byte> bytes);
  void update(std::string_view text);
  std::string hex();  // finishes the digest; lowercase, 64 characters

 private:
  struct State;
  std::unique_ptr<State> state_;
};

std::string sha256_hex(std::string_view text);
// Reads the file in large sequential blocks. Throws IoError.
std::string sha256_file(const std::filesystem::path& path);

}  // namespace mosaic
