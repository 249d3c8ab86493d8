// Private to daemon/config/: the parsers of the config's sections, one file each, called from
// the document (config.cpp) and from each other (a job holds a source and a pipeline, a
// pipeline holds augmentation steps). All refuse bad input through Reader::fail, so every
// failure is a ConfigError naming FILE:LINE:COL and the key path.
#pragma once

#include <filesystem>
#include <string>

#include "augment/color_ops.hpp"
#include "augment/erasing.hpp"
#include "augment/op_schema.hpp"
#include "config/config.hpp"
#include "config/yaml_reader.hpp"
#include "image/pipeline_spec.hpp"

namespace stoker::config {

// server_section.cpp: `server:`.
void parse_server(const Reader& r, const Value& s, const std::filesystem::path& base_dir, ServerConfig& out);

// job_section.cpp: one entry of `jobs:` (name as written, at name_at; j its body).
JobConfig parse_job(const Reader& r, const std::string& name, Mark name_at, const Value& j,
                    const std::filesystem::path& base_dir);

// job_source.cpp: a job's `source:` (imagefolder, filelist or tar; roots and lists must exist).
// `mixture_entry`: an element of `sources:`, which may also hold `weight` and `name` (read by
// parse_sources).
void parse_source(const Reader& r, const Value& section, const std::filesystem::path& base_dir, SourceConfig& out,
                  bool mixture_entry = false);

// job_sources.cpp: a job's `sources:` (a weighted mixture) with `epoch_size`, `labels` and
// `allow_missing_classes`; refuses those three without `sources:`.
void parse_sources(const Reader& r, const Fields& f, const std::filesystem::path& base_dir, JobConfig& job);

// pipeline_steps.cpp: a job's `pipeline:`, the steps in the one order the engine runs them;
// decode, the geometry steps, horizontal_flip and normalize are read there.
// remote: {...} of a job (job_remote.cpp): the workers, the token file, TLS files, and the
// job's keys the workers are sent. After the pipeline and decoded_store were read.
void parse_remote(const Reader& r, const Value& v, const Value& job_node, const std::filesystem::path& base_dir,
                  JobConfig& job);

void parse_pipeline(const Reader& r, const Value& seq, image::PipelineSpec& spec);

// augment_steps.cpp: the parameters of one augmentation step, read by walking its schema
// (augment/op_schema.hpp). Where the step may stand in the pipeline is parse_pipeline's
// business; `body` is the step's mapping (empty for a bare `- name`).
augment::AugmentStep parse_augment_step(const Reader& r, const Value& body, const augment::OpSchema& op,
                                        const augment::OpContext& ctx);

}  // namespace stoker::config
