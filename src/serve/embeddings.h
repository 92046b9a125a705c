// POST /v1/embeddings (OpenAI's Embeddings API) for a served embedding model (one whose directory
// has sentence-transformers' modules.json, engine/embedder.h). Body fields: model (string),
// input (a non-empty string, an array of up to 2048 non-empty strings, an array of token ids, or
// an array of such arrays), encoding_format ("float", the default, or "base64": the float32 values
// little-endian, base64-encoded), dimensions (integer 1 .. the model's size: the first values,
// L2-normalized again when the model normalizes), user (accepted, unused: it changes nothing).
// Any other field is refused, naming it. Texts are tokenized as `flashnorm embed` tokenizes them
// (the model's default prompt, if it has one, before each); an input longer than the model's
// max_seq_length (or its context) is refused rather than cut. The answer: {"object": "list",
// "data": [{"object": "embedding", "index": i, "embedding": ...}], "model", "usage":
// {"prompt_tokens", "total_tokens"}}.
#pragma once

#include <httplib.h>

#include "completion.h"

namespace flashnorm::serve {

// Fills `res`. Errors: ApiError 400 naming the field for a bad body, an input that is empty, too
// long or outside the vocabulary, dimensions above the model's, or a model that does not serve
// embeddings; 404 for an unknown model; 429 for a full queue; 503 while shutting down.
void answer_embeddings(const ModelMap& models, const httplib::Request& req, httplib::Response& res);

}  // namespace flashnorm::serve
