# ctest labels and timeouts, in seconds, for a Release build (tests/CMakeLists.txt scales them: x10
# under a sanitizer, x20 without optimization, or by REWIND_TEST_TIMEOUT_SCALE). A timeout is about
# five times a test's time, so that a test that becomes several times slower fails instead of
# hiding under a blanket limit.
#
# Labels (`ctest -L fast`, `ctest -LE gpu`, ...):
#   fast    every test by default: under 4 s measured, so the floor of 20 s (CI runs 2 jobs on 2
#           noisy cores);
#   slow    the exceptions below, with their own timeouts;
#   gpu     the CUDA tests (test_cuda_*): they skip on a machine without a GPU, so their time is
#           not known; rwd_test_timeout_gpu;
#   node    rewind serve driven by the openai npm client (scripts/serve);
#   python  the Python module's tests.
# A test that takes longer than the fast floor allows (over about 4 s) goes into the list below
# with five times its time, rounded up to 5 s.
set(rwd_test_timeout_fast 20)
set(rwd_test_timeout_gpu 120)
# The exceptions: ctest's name (gtest's Suite.Test[/param], Simde.* for the SIMDe builds), its
# timeout; they are labelled slow as well. Times (after '#') from two runs of the whole suite with
# `ctest -j2 --output-junit` on a 2-core machine shared with other builds (load average about 5),
# g++ 12 Release; one test's time differed up to 3.2x between the runs, so the slower run counts.
# An entry naming no test is ignored. A test's time: `ctest --test-dir build -R '^Name$'`.
set(rwd_test_timeouts
  # The opt-in tests (REWIND_LONG_TESTS=1; CI skips them), run together: LongRun took 31 s;
  # Speculative's runs 15-25 minutes (24x the items and 1.6x the runs per item of
  # LosslessOnWorkloads at up to 2.5x the tokens), so its entry is 5x an estimate.
  "LongRun.HundredThousandSpeculativeTokensEqualPlainWithFlatMemorySlow" 155  # 30.99
  "Speculative.LosslessAllWorkloadsSlow" 7200  # > 600
  # rewind serve's drain test: two servers, two shutdowns, each waiting out idle keep-alive
  # connections (6.0 s alone; the other node tests 3-4.5 s, at the floor).
  "Serve.drain" 60  # 6.5
  "Serve.disconnect" 45  # 8.5
  "Serve.openai_client" 40  # 3.3 (grows with the end-to-end checks)
  "Simde.KqPacked.EveryBodyGivesTheFileLayoutsBits" 30  # 5.1
  "Models/TokenTree.EveryNodeHasItsPathsLinearLogits/kq_256_q6_k" 25  # 5.0
  "Models/TokenTree.EveryNodeHasItsPathsLinearLogits/kq_256_q5_k_m" 20  # 4.0
  # Tool calls forced by a grammar: 12 requests of up to 160 tokens each, whole and streamed.
  "Serve.tools" 60  # 6.4 alone, before the tool_choice auto check (about 3 s more)
  # tool_choice auto: 18 requests of up to 80 tokens on a 151k-vocabulary dummy (written on the
  # first run): 3.9 s of CPU, 10-16 s at a load average of 13.
  "ServeToolAuto.CallsAreValidAndSpeculationChangesNothing" 60  # 13.6 under load 12.8
  # The JSON workload's 48 schemas, four requests each, at concurrency 4.
  "Serve.structured" 45  # 5.6 alone, 8-9 s under load
  # The Hugging Face comparison: not measured, so the GPU tests' allowance.
  "Python.hf" 120
  # The cluster tests (scripts/cluster, where the build has them), measured alone on the 2-core
  # machine: each starts three replicas and a balancer.
  "JsonSchema.node" 240  # not yet measured in the whole suite
  "Grammar.xgrammar_oracle" 240  # 40-48 s on a loaded machine
  "Cluster.affinity.haproxy" 50  # 9.1
  "Cluster.affinity.nginx" 40  # 7.9
  "Cluster.failover.haproxy" 50  # 9.2
  "Cluster.failover.nginx" 40  # 7.7
  "Cluster.rolling.haproxy" 30  # 5.7
  "Cluster.rolling.nginx" 55  # 11.0
  # Above the floor: five times the slower of the two runs (after '#': both times).
  "Speculative.LosslessOnWorkloads"                                 75  # 8.92 14.85
  "Models/Reference.MatchesLlamaCpp/pycode_4m_q8_0_llamacpp"        65  # 12.71 7.81
  "Speculative.RejectionModePreservesTheTargetDistribution"         65  # 3.85 12.13
  "Models/Reference.MatchesLlamaCpp/pycode_4m_f16_llamacpp"         65  # 12.06 8.42
  "Models/Reference.MatchesLlamaCpp/pycode_4m_llamacpp"             60  # 11.82 9.15
  "Models/Reference.MatchesLlamaCpp/pycode_4m_q4_0_llamacpp"        50  # 9.28 8.11
  "Models/Reference.MatchesLlamaCpp/pycode_4m_q5_k_m_llamacpp"      50  # 9.25 9.16
  "Models/Reference.MatchesLlamaCpp/pycode_4m_q4_k_m_llamacpp"      45  # 8.75 7.78
  "Speculative.LosslessOnEveryArchitecture"                         45  # 4.23 8.74
  "Speculative.LosslessWithF16Caches"                               50  # 9.51 (one run, load average about 10)
  "Cli.GenerateReproducesLlamaCppGreedyOutput"                      25  # 5.02 (one run, load average about 8; both cache types)
  "Models/Reference.MatchesLlamaCpp/kq_256_llamacpp"                45  # 8.40 8.10
  "Models/Reference.MatchesLlamaCpp/pycode_4m_q6_k_llamacpp"        45  # 8.16 8.01
  "Models/BatchDecoding.EveryRequestEqualsItsOwnPlainDecoding/f32"  35  # 6.49 4.29
  "Models/Reference.MatchesLlamaCpp/arch_qwen2_llamacpp"            35  # 3.60 6.25
  "Simde.Attention.UnitsOfSeveralKvHeadsKeepEveryHeadsBits"         35  # 3.74 6.24
  "Models/Reference.MatchesLlamaCpp/arch_qwen3_llamacpp"            35  # 3.24 6.19
  "Models/Reference.MatchesLlamaCpp/arch_phi3_llamacpp"             30  # 2.12 5.80
  "DummyModel.QuantizedMixes"                                       30  # 5.78 1.91
  "Models/Reference.MatchesLlamaCpp/kq_256_q5_k_m_llamacpp"         30  # 5.28 4.99
  "Models/Reference.MatchesLlamaCpp/arch_llama3_llamacpp"           30  # 3.71 5.11
  "Models/Reference.MatchesLlamaCpp/arch_gemma3_llamacpp"           25  # 1.73 4.93
  "Models/Reference.MatchesLlamaCpp/kq_256_q4_k_m_llamacpp"         25  # 4.71 4.35
  "Models/Reference.MatchesLlamaCpp/kq_256_q6_k_llamacpp"           25  # 4.08 4.59
  "Attention.UnitsOfSeveralKvHeadsKeepEveryHeadsBits"               25  # 4.44 1.51
  "Models/Reference.MatchesLlamaCpp/kq_256_exact"                   25  # 4.29 2.41
)
