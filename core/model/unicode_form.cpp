#include "model/unicode_form.h"

#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>

#include <cstdint>
#include <limits>

#include "common/error.h"

namespace mosaic {

std::string normalize(std::string_view text, UnicodeForm form) {
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* n = form == UnicodeForm::NFC ? icu::Normalizer2::getNFCInstance(status) : icu::Normalizer2::getNFKCInstance(status);
  if (U_FAILURE(status)) throw IoError("ICU", "", std::string("has no Unicode normalization data: ") + u_errorName(status), "reinstall libicu72");
  if (text.size() > static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max()))
    throw InvalidArgument("text", "", "is over 2 GiB, more than one text can be normalized at once");
  const icu::StringPiece in(text.data(), static_cast<std::int32_t>(text.size()));
  if (n->isNormalizedUTF8(in, status) && U_SUCCESS(status)) return std::string(text);  // most text: no copy made twice
  status = U_ZERO_ERROR;
  std::string out;
  out.reserve(text.size());
  icu::StringByteSink<std::string> sink(&out);
  n->normalizeUTF8(0, in, sink, nullptr, status);
  if (U_FAILURE(status)) throw InvalidArgument("text", "", std::string("could not be normalized: ") + u_errorName(status));
  return out;
}

}  // namespace mosaic
