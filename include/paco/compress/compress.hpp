#pragma once
// paco/compress: the Compressor concepts and their models, error feedback, and L-GreCo.
// docs/compression.md says which payloads are summed and which all-gathered on the wire.
#include "paco/compress/cast.hpp"
#include "paco/compress/combine.hpp"
#include "paco/compress/concepts.hpp"
#include "paco/compress/error_feedback.hpp"
#include "paco/compress/identity.hpp"
#include "paco/compress/lgreco.hpp"
#include "paco/compress/module_codec.hpp"
#include "paco/compress/powersgd.hpp"
#include "paco/compress/quantize.hpp"
#include "paco/compress/segments.hpp"
#include "paco/compress/sign_prune.hpp"
#include "paco/compress/spec.hpp"
#include "paco/compress/topk.hpp"

namespace paco::compress {
static_assert(Compressor<error_feedback<identity>::bound>);
static_assert(Compressor<error_feedback<quantize>::bound>);
static_assert(summable_v<identity> && summable_v<cast> && summable_v<powersgd>);
static_assert(!summable_v<quantize> && !summable_v<topk> && !summable_v<sign_prune>);
}  // namespace paco::compress
