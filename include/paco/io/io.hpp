#pragma once
// paco/io: corpora (Brown, a directory of text files, JSONL), tokenization, batches, safetensors
// checkpoints, metrics, progress.
#include "paco/io/atomic_file.hpp"
#include "paco/io/batches.hpp"
#include "paco/io/checkpoint.hpp"
#include "paco/io/corpus.hpp"
#include "paco/io/metrics.hpp"
#include "paco/io/progress.hpp"
#include "paco/io/safetensors.hpp"
#include "paco/io/table.hpp"
#include "paco/io/text_corpus.hpp"
#include "paco/io/timestamped_lines.hpp"
#include "paco/io/tokenizer.hpp"
