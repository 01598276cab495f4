# Per-test ctest timeouts, in seconds, for a Release build (tests/CMakeLists.txt scales them: x10
# under a sanitizer, x20 without optimization, or by REWIND_TEST_TIMEOUT_SCALE). Each is five
# times the test's measured time, rounded up to 5 s, and at least 20 s (CI runs 2 jobs on 2 noisy
# cores): a test that becomes several times slower fails instead of hiding under a blanket limit.
# Measured 2026-12-03 on a 2-core machine shared with two other builds (load average about 5),
# g++ 12 Release: the whole suite twice with `ctest -j2 --output-junit` (117 s and 125 s; one
# test's time differed up to 3.2x between the runs, so the slower run counts), and the two opt-in
# *Slow tests alone with REWIND_LONG_TESTS=1.
#
# Names are ctest's (gtest's Suite.Test[/param], Simde.* for the SIMDe builds). A test not listed
# gets rwd_test_timeout_default: the GPU tests (listed at the end: they skip on a machine without
# one, so were not measured) and new or renamed tests until they are measured and added here.
# An entry naming no test is ignored. A test's time: `ctest --test-dir build -R '^Name$'`; all:
# `ctest --test-dir build -j2 --output-junit times.xml`, then 5x each <testcase time>.
set(rwd_test_timeout_default 120)
set(rwd_test_timeouts
  # The opt-in tests (REWIND_LONG_TESTS=1; CI skips them), run together: LongRun took 31 s;
  # Speculative's ran past the old 600 s limit and was stopped, so its entry is 5x an estimate:
  # 24x the items and 1.6x the runs per item of LosslessOnWorkloads (9-15 s) at up to 2.5x the
  # tokens, 15-25 minutes.
  "LongRun.HundredThousandSpeculativeTokensEqualPlainWithFlatMemorySlow" 155  # 30.99
  "Speculative.LosslessAllWorkloadsSlow" 7200  # > 600
  # Above the floor: 5x the slower of the two runs, rounded up to 5 s (after '#': both times).
  # rewind serve's node tests (scripts/serve), measured alone on the 2-core machine: openai_client
  # 3.0, load 3.7, disconnect 4.5 (a 3 s stalled client), drain 6.0 s: the floor of 20 s, and
  # 60 s for drain (two servers, two shutdowns, each waiting out idle keep-alive connections).
  "Serve.drain" 60  # 6.5
  # The cluster tests (scripts/cluster), measured alone on the 2-core machine (seconds): five times
  # the time, rounded up to 5 s. Each starts three replicas and a balancer.
  "Cluster.affinity.haproxy" 50  # 9.1
  "Cluster.affinity.nginx" 40  # 7.9
  "Cluster.failover.haproxy" 50  # 9.2
  "Cluster.failover.nginx" 40  # 7.7
  "Cluster.rolling.haproxy" 30  # 5.7
  "Cluster.rolling.nginx" 55  # 11.0
  "Speculative.LosslessOnWorkloads"                                 75  # 8.92 14.85
  "Models/Reference.MatchesLlamaCpp/pycode_4m_q8_0_llamacpp"        65  # 12.71 7.81
  "Speculative.RejectionModePreservesTheTargetDistribution"         65  # 3.85 12.13
  "Models/Reference.MatchesLlamaCpp/pycode_4m_f16_llamacpp"         65  # 12.06 8.42
  "Models/Reference.MatchesLlamaCpp/pycode_4m_llamacpp"             60  # 11.82 9.15
  "Models/Reference.MatchesLlamaCpp/pycode_4m_q4_0_llamacpp"        50  # 9.28 8.11
  "Models/Reference.MatchesLlamaCpp/pycode_4m_q5_k_m_llamacpp"      50  # 9.25 9.16
  "Models/Reference.MatchesLlamaCpp/pycode_4m_q4_k_m_llamacpp"      45  # 8.75 7.78
  "Speculative.LosslessOnEveryArchitecture"                         45  # 4.23 8.74
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
  # At the floor: under 4 s in both runs.
  "AddBiasAndScale.Elementwise" 20
  "AddInplace.Adds" 20
  "ArchModels.LinearRopeScalingIsRead" 20
  "ArchModels.LoadWithTheirOwnHyperparameters" 20
  "ArchModels.MissingOrMisshapenTensorsAreRefusedByName" 20
  "Attention.EveryLevelGivesTheScalarModelsBits" 20
  "Attention.ExtremeScoresStayFinite" 20
  "Attention.FirstTokenReturnsItsValue" 20
  "Attention.LongPrefixTilesKeepEveryResult" 20
  "Attention.MatchesReference" 20
  "Attention.RejectsBadArguments" 20
  "Attention.ScaleOverridesTheDefault" 20
  "Attention.ScratchUptoCoversEveryCallOfACache" 20
  "Attention.SlidingWindow" 20
  "Attention.ThreadCountNeverChangesAResult" 20
  "Attention.TokenCountNeverChangesAResult" 20
  "BatchDecoder.AdmissionRefusalsAreClearAndChangeNothing" 20
  "BatchDecoder.CancelDuringPrefillRetiresItAlone" 20
  "BatchDecoder.CancelEndsOneRequestOthersGoOn" 20
  "BatchDecoder.CostModelWithAFixedPassCostDecidesDeterministically" 20
  "BatchDecoder.DecodePassesAreCountedByRequestsCarried" 20
  "BatchDecoder.FailingRequestEndsAloneWithItsOwnError" 20
  "BatchDecoder.PassTokenBudgetTrimsGuessesOnly" 20
  "BatchDecoder.PromptsRunInChunksInsideDecodePasses" 20
  "BatchDecoder.RefusesBadOptions" 20
  "BatchDecoder.RefusesLlamaCppNumerics" 20
  "BatchDecoder.SharedPromptPrefixIsCopiedNotRecomputed" 20
  "BatchErrors.RefusedBatchChangesNothing" 20
  "BenchConfigs.MakeConfigsCrossesSourcesKsAndPolicies" 20
  "BenchEndToEnd.RefusesDraftConfigurationWithoutDraftModel" 20
  "BenchEndToEnd.ShortRunOnBundledModelIsLossless" 20
  "BenchReport.JsonParsesBackWithEveryRawFigure" 20
  "BenchReport.JsonRoundTrips" 20
  "BenchReport.MarkdownHasTablesPerKindAndVerdict" 20
  "BenchReport.ProgressLine" 20
  "BenchReport.SvgIsWellFormedWithAxesLegendAndTitle" 20
  "BenchResult.SummariesUsePerItemRatiosAndPooledCounts" 20
  "BenchScale.BandwidthFraction" 20
  "BenchScale.CostCurveOnASeededPrefix" 20
  "BenchScale.CostRatioAndProjection" 20
  "BenchScale.MemoryBandwidthRunsAndValidates" 20
  "BenchScale.ReportAndJsonKeepTheScaleFigures" 20
  "BenchScale.ThroughputRunsEveryPassAndGivesBothDecodeFigures" 20
  "BenchScale.WeightBytesPerToken" 20
  "BenchStats.FirstDifference" 20
  "BenchStats.MedianOfOddAndEvenCounts" 20
  "BenchStats.QuantilesInterpolate" 20
  "BenchStats.Ratios" 20
  "BenchWorkload.LoadsSharedWorkloads" 20
  "BenchWorkload.MalformedLinesNameFileAndLine" 20
  "BenchWorkload.ParsesLinesWithOptionalFields" 20
  "CApi.test_capi" 20
  "CApi.test_capi_batch" 20
  "CApi.test_capi_errors" 20
  "Cli.BadRequestsFailWithAMessage" 20
  "Cli.BatchWritesOneLinePerRequestEachEqualToGenerate" 20
  "Cli.EndlessOrOversizedInputIsRefused" 20
  "Cli.GenerateReproducesLlamaCppGreedyOutput" 20
  "Cli.InspectDescribesFilesWhateverTheirTensorTypes" 20
  "Cli.NegativeTemperatureIsGreedy" 20
  "Cli.SimdLevelCapGivesTheSameTokens" 20
  "CompositeSource.FirstPolicyFallsBackInOrderAndKeepsEveryMemberInStep" 20
  "CompositeSource.LongestPolicyLetsALongerProposalWinAndStopsAtAFullOne" 20
  "Concurrency.SharedTokenizerAndParallelLoads" 20
  "Concurrency.ThreadsSharingOneModelMatchSequentialRuns" 20
  "CudaAttention.RejectsBadArgumentsOnTheHost" 20
  "CudaMatmul.RejectsBadArgumentsOnTheHost" 20
  "CudaOps.NoDeviceIsAClearUnsupportedError" 20
  "CudaOps.RejectsBadArgumentsOnTheHost" 20
  "Device.CudaWithoutBackendOrGpuIsAClearUnsupportedError" 20
  "Device.ParsesCpuCudaAndOrdinals" 20
  "DraftSource.DraftsGreedilyAndRollsBackToTheAcceptedText" 20
  "DraftSource.RefusesAContextShorterThanTheTargetCache" 20
  "DraftSource.RefusesAModelWithAnotherVocabulary" 20
  "DraftSource.StopsDraftingWhenUnsure" 20
  "Dtype.Bf16" 20
  "Dtype.DequantizeRow" 20
  "Dtype.Fp16KnownValues" 20
  "Dtype.Fp16MatchesF16cHardware" 20
  "Dtype.Fp16RoundTripIsExactForEveryHalf" 20
  "Dtype.Fp16RoundsToNearestEven" 20
  "Dtype.Names" 20
  "Dtype.QuantizeQ8_0FollowsGgmlRule" 20
  "Dtype.RowBytes" 20
  "DummyModel.ErrorsLeaveNoFile" 20
  "DummyModel.LlamaQuantizeTypeChoices" 20
  "DummyModel.SameSeedSameBytesWhateverTheThreads" 20
  "DummyModel.ShapesAndNames" 20
  "DummyModel.TinyFilesLoadAndGenerate" 20
  "DummyModel.WeightStatistics" 20
  "ForwardErrors.BadInputLeavesCacheUnchanged" 20
  "ForwardErrors.BadOptionsAndFiles" 20
  "ForwardF16.CloseToF32AndBatchInvariant" 20
  "ForwardHotPath.AttentionScratchFollowsTheCacheNotTheClaimedContext" 20
  "ForwardHotPath.BatchAllocatesNothing" 20
  "ForwardHotPath.DecodeAllocatesNothing" 20
  "ForwardHotPath.SeventeenTokensAtTheEndOfTheContextFit" 20
  "ForwardLlamaCpp.ThreadsAndSmallSplitsKeepBitsPassSizeDoesNot" 20
  "Geglu.MatchesReferenceAndIsElementwise" 20
  "GeneratePlain.ValidatesAndLeavesCacheUnchanged" 20
  "GgmlCompat.AttentionNearReference" 20
  "GgmlCompat.AttentionRejectsBadInput" 20
  "GgmlCompat.FaPathFollowsPassSize" 20
  "GgmlCompat.GegluFollowsTheF16Table" 20
  "GgmlCompat.MatmulFollowsGgmlOrder" 20
  "GgmlCompat.MatmulOfSeveralRowsFollowsTinyBlasOrder" 20
  "GgmlCompat.MatmulRejectsBadInput" 20
  "GgmlCompat.MatmulSameBitsOnEveryPathAndThreadCount" 20
  "GgmlCompat.OneChunkRoundsTheRunningSumToF16" 20
  "GgmlCompat.SlidingWindow" 20
  "Gguf.AidreamsFirstValues" 20
  "Gguf.MoveKeepsViewsValid" 20
  "Gguf.OpensEveryModelAndVocabulary" 20
  "Gguf.SyntheticEveryTypeV2AndV3" 20
  "Gguf.TensorValuesAgreeAcrossConversions" 20
  "Gguf.TensorViews" 20
  "Gguf.TypeTable" 20
  "Gguf.TypedGetters" 20
  "Gguf.ValueToString" 20
  "Gguf.VocabularyFiles" 20
  "GgufWriter.AbandonedWriterLeavesNoFile" 20
  "GgufWriter.BadPathIsAnError" 20
  "GgufWriter.DiskFullIsAnErrorAndLeavesNoFile" 20
  "GgufWriter.EveryValueTypeRoundTrips" 20
  "GgufWriter.FailedRewriteKeepsThePreviousFile" 20
  "GgufWriter.RefusesBadInputWithClearErrors" 20
  "GgufWriter.RewritesARealModelByteForByte" 20
  "GgufWriter.ShortDataLeavesNoFile" 20
  "GgufWriter.TensorsOfEveryTypeStreamedInOddPieces" 20
  "KqPacked.EveryBodyGivesTheFileLayoutsBits" 20
  "KqPacked.RefusesBadInput" 20
  "KqPacked.SharedInputGivesEachMatmulsBits" 20
  "KqPacked.SharedInputRefusesBadInput" 20
  "KqPacked.Sizes" 20
  "KqPacked.TokenAndThreadCountsNeverChangeAResult" 20
  "KvCacheTest.CommitBounds" 20
  "KvCacheTest.CopyPrefixContinuesBitForBit" 20
  "KvCacheTest.F16SaveLoadAndTypeConversion" 20
  "KvCacheTest.FailedLoadLeavesTargetUnchanged" 20
  "KvCacheTest.ForkIsIndependent" 20
  "KvCacheTest.ImportChecksEveryShape" 20
  "KvCacheTest.ImportExportRoundTrip" 20
  "KvCacheTest.LoadRefusesAnotherModel" 20
  "KvCacheTest.LoadRefusesDamagedFiles" 20
  "KvCacheTest.LoadRefusesEndlessAndOversizedInput" 20
  "KvCacheTest.SaveFailureLeavesCacheAndOldFile" 20
  "KvCacheTest.SaveLoadRoundTrip" 20
  "KvCacheTest.ShapeAndIdentity" 20
  "KvCacheTest.TruncateIsRollback" 20
  "KvCacheTest.VersionChangesOnWritesNotOnTruncate" 20
  "KvCacheTest.WriteFailingMidwayKeepsPreviousFile" 20
  "LlamaModel.BundledModelLoads" 20
  "LlamaModel.Defaults" 20
  "LlamaModel.FingerprintStableAndDistinct" 20
  "LlamaModel.InconsistentFilesAreRefused" 20
  "LlamaModel.MalformedGgufSurfacesAsError" 20
  "LlamaModel.SharedModelsLoadWithReadmeHyperparameters" 20
  "LlamaModel.TiedHeadWhenOutputIsAbsent" 20
  "LlamaModel.VocabularyOnlyFileIsRefused" 20
  "Malformed.BadAlignment" 20
  "Malformed.BadMagic" 20
  "Malformed.DimsOverflow" 20
  "Malformed.HugeCounts" 20
  "Malformed.MisalignedOffsets" 20
  "Malformed.NotAFile" 20
  "Malformed.OriginalAndRoundTripAreValid" 20
  "Malformed.RandomByteCorruptionNeverCrashes" 20
  "Malformed.StringLengthsPastTheEnd" 20
  "Malformed.StructuralOddities" 20
  "Malformed.TensorOffsetsOutsideTheFile" 20
  "Malformed.TruncatedAtEveryBoundary" 20
  "Malformed.TruncatedAtRandomPoints" 20
  "Malformed.UnknownTensorType" 20
  "Malformed.UnknownValueType" 20
  "Malformed.UnknownVersion" 20
  "Matmul.DetectsALevelAndNamesIt" 20
  "Matmul.FloatBodiesMatchTheirScalarModelBitForBit" 20
  "Matmul.MatchesReference" 20
  "Matmul.Q8ActivationQuantizationFollowsTheRule" 20
  "Matmul.Q8WeightsMayHoldMinus128" 20
  "Matmul.RejectsBadArguments" 20
  "Matmul.ScalarOrderIsSequential" 20
  "Matmul.ThreadCountNeverChangesAResult" 20
  "Matmul.TokenCountNeverChangesAResult" 20
  "MatmulQuant.ActivationEdgeCasesAgreeAcrossLevels" 20
  "MatmulQuant.EveryBodyMatchesItsScalarModelBitForBit" 20
  "MatmulQuant.MatchesReference" 20
  "MatmulQuant.RefusesBadShapesAndScratch" 20
  "MatmulQuant.ThreadCountNeverChangesAResult" 20
  "MatmulQuant.TokenCountNeverChangesAResult" 20
  "ModelLoad.RefusesUnsupportedWeightTypeByName" 20
  "ModelLoad.RepackingThreadsDoNotChangeThePackedWeights" 20
  "ModelLoad.WeightsAndHyperparameters" 20
  "Models/Batch.SequenceBitsIndependentOfCompanionsOrderAndThreads/arch_gemma3" 20
  "Models/Batch.SequenceBitsIndependentOfCompanionsOrderAndThreads/arch_llama3" 20
  "Models/Batch.SequenceBitsIndependentOfCompanionsOrderAndThreads/arch_phi3" 20
  "Models/Batch.SequenceBitsIndependentOfCompanionsOrderAndThreads/arch_qwen2" 20
  "Models/Batch.SequenceBitsIndependentOfCompanionsOrderAndThreads/arch_qwen3" 20
  "Models/Batch.SequenceBitsIndependentOfCompanionsOrderAndThreads/f32" 20
  "Models/Batch.SequenceBitsIndependentOfCompanionsOrderAndThreads/pycode_4m_f16" 20
  "Models/Batch.SequenceBitsIndependentOfCompanionsOrderAndThreads/pycode_4m_q4_0" 20
  "Models/Batch.SequenceBitsIndependentOfCompanionsOrderAndThreads/pycode_4m_q4_k_m" 20
  "Models/Batch.SequenceBitsIndependentOfCompanionsOrderAndThreads/pycode_4m_q5_k_m" 20
  "Models/Batch.SequenceBitsIndependentOfCompanionsOrderAndThreads/pycode_4m_q6_k" 20
  "Models/Batch.SequenceBitsIndependentOfCompanionsOrderAndThreads/q8_0" 20
  "Models/Batch.StepwiseDecodeMatchesSoloDecode/arch_gemma3" 20
  "Models/Batch.StepwiseDecodeMatchesSoloDecode/arch_llama3" 20
  "Models/Batch.StepwiseDecodeMatchesSoloDecode/arch_phi3" 20
  "Models/Batch.StepwiseDecodeMatchesSoloDecode/arch_qwen2" 20
  "Models/Batch.StepwiseDecodeMatchesSoloDecode/arch_qwen3" 20
  "Models/Batch.StepwiseDecodeMatchesSoloDecode/f32" 20
  "Models/Batch.StepwiseDecodeMatchesSoloDecode/pycode_4m_f16" 20
  "Models/Batch.StepwiseDecodeMatchesSoloDecode/pycode_4m_q4_0" 20
  "Models/Batch.StepwiseDecodeMatchesSoloDecode/pycode_4m_q4_k_m" 20
  "Models/Batch.StepwiseDecodeMatchesSoloDecode/pycode_4m_q5_k_m" 20
  "Models/Batch.StepwiseDecodeMatchesSoloDecode/pycode_4m_q6_k" 20
  "Models/Batch.StepwiseDecodeMatchesSoloDecode/q8_0" 20
  "Models/BatchDecoding.EveryRequestEqualsItsOwnPlainDecoding/q8_0" 20
  "Models/Forward.ChunkingAndLogitModes/arch_gemma3" 20
  "Models/Forward.ChunkingAndLogitModes/arch_llama3" 20
  "Models/Forward.ChunkingAndLogitModes/arch_phi3" 20
  "Models/Forward.ChunkingAndLogitModes/arch_qwen2" 20
  "Models/Forward.ChunkingAndLogitModes/arch_qwen3" 20
  "Models/Forward.ChunkingAndLogitModes/f32" 20
  "Models/Forward.ChunkingAndLogitModes/kq_256_q4_k_m" 20
  "Models/Forward.ChunkingAndLogitModes/kq_256_q5_k_m" 20
  "Models/Forward.ChunkingAndLogitModes/kq_256_q6_k" 20
  "Models/Forward.ChunkingAndLogitModes/pycode_4m_q4_0" 20
  "Models/Forward.ChunkingAndLogitModes/pycode_4m_q4_k_m" 20
  "Models/Forward.ChunkingAndLogitModes/pycode_4m_q5_k_m" 20
  "Models/Forward.ChunkingAndLogitModes/pycode_4m_q6_k" 20
  "Models/Forward.ChunkingAndLogitModes/q8_0" 20
  "Models/Forward.RowsIndependentOfBatching/arch_gemma3" 20
  "Models/Forward.RowsIndependentOfBatching/arch_llama3" 20
  "Models/Forward.RowsIndependentOfBatching/arch_phi3" 20
  "Models/Forward.RowsIndependentOfBatching/arch_qwen2" 20
  "Models/Forward.RowsIndependentOfBatching/arch_qwen3" 20
  "Models/Forward.RowsIndependentOfBatching/f32" 20
  "Models/Forward.RowsIndependentOfBatching/kq_256_q4_k_m" 20
  "Models/Forward.RowsIndependentOfBatching/kq_256_q5_k_m" 20
  "Models/Forward.RowsIndependentOfBatching/kq_256_q6_k" 20
  "Models/Forward.RowsIndependentOfBatching/pycode_4m_q4_0" 20
  "Models/Forward.RowsIndependentOfBatching/pycode_4m_q4_k_m" 20
  "Models/Forward.RowsIndependentOfBatching/pycode_4m_q5_k_m" 20
  "Models/Forward.RowsIndependentOfBatching/pycode_4m_q6_k" 20
  "Models/Forward.RowsIndependentOfBatching/q8_0" 20
  "Models/Forward.ThreadCountDoesNotChangeBits/arch_gemma3" 20
  "Models/Forward.ThreadCountDoesNotChangeBits/arch_llama3" 20
  "Models/Forward.ThreadCountDoesNotChangeBits/arch_phi3" 20
  "Models/Forward.ThreadCountDoesNotChangeBits/arch_qwen2" 20
  "Models/Forward.ThreadCountDoesNotChangeBits/arch_qwen3" 20
  "Models/Forward.ThreadCountDoesNotChangeBits/f32" 20
  "Models/Forward.ThreadCountDoesNotChangeBits/kq_256_q4_k_m" 20
  "Models/Forward.ThreadCountDoesNotChangeBits/kq_256_q5_k_m" 20
  "Models/Forward.ThreadCountDoesNotChangeBits/kq_256_q6_k" 20
  "Models/Forward.ThreadCountDoesNotChangeBits/pycode_4m_q4_0" 20
  "Models/Forward.ThreadCountDoesNotChangeBits/pycode_4m_q4_k_m" 20
  "Models/Forward.ThreadCountDoesNotChangeBits/pycode_4m_q5_k_m" 20
  "Models/Forward.ThreadCountDoesNotChangeBits/pycode_4m_q6_k" 20
  "Models/Forward.ThreadCountDoesNotChangeBits/q8_0" 20
  "Models/Forward.TruncateThenRecomputeEqualsFresh/arch_gemma3" 20
  "Models/Forward.TruncateThenRecomputeEqualsFresh/arch_llama3" 20
  "Models/Forward.TruncateThenRecomputeEqualsFresh/arch_phi3" 20
  "Models/Forward.TruncateThenRecomputeEqualsFresh/arch_qwen2" 20
  "Models/Forward.TruncateThenRecomputeEqualsFresh/arch_qwen3" 20
  "Models/Forward.TruncateThenRecomputeEqualsFresh/f32" 20
  "Models/Forward.TruncateThenRecomputeEqualsFresh/kq_256_q4_k_m" 20
  "Models/Forward.TruncateThenRecomputeEqualsFresh/kq_256_q5_k_m" 20
  "Models/Forward.TruncateThenRecomputeEqualsFresh/kq_256_q6_k" 20
  "Models/Forward.TruncateThenRecomputeEqualsFresh/pycode_4m_q4_0" 20
  "Models/Forward.TruncateThenRecomputeEqualsFresh/pycode_4m_q4_k_m" 20
  "Models/Forward.TruncateThenRecomputeEqualsFresh/pycode_4m_q5_k_m" 20
  "Models/Forward.TruncateThenRecomputeEqualsFresh/pycode_4m_q6_k" 20
  "Models/Forward.TruncateThenRecomputeEqualsFresh/q8_0" 20
  "Models/Reference.MatchesLlamaCpp/aidreams260K_exact" 20
  "Models/Reference.MatchesLlamaCpp/aidreams260K_llamacpp" 20
  "Models/Reference.MatchesLlamaCpp/arch_gemma3_exact" 20
  "Models/Reference.MatchesLlamaCpp/arch_llama3_exact" 20
  "Models/Reference.MatchesLlamaCpp/arch_phi3_exact" 20
  "Models/Reference.MatchesLlamaCpp/arch_qwen2_exact" 20
  "Models/Reference.MatchesLlamaCpp/arch_qwen3_exact" 20
  "Models/Reference.MatchesLlamaCpp/kq_256_q4_k_m_exact" 20
  "Models/Reference.MatchesLlamaCpp/kq_256_q5_k_m_exact" 20
  "Models/Reference.MatchesLlamaCpp/kq_256_q6_k_exact" 20
  "Models/Reference.MatchesLlamaCpp/pycode_4m_exact" 20
  "Models/Reference.MatchesLlamaCpp/pycode_4m_f16_exact" 20
  "Models/Reference.MatchesLlamaCpp/pycode_4m_q4_0_exact" 20
  "Models/Reference.MatchesLlamaCpp/pycode_4m_q4_k_m_exact" 20
  "Models/Reference.MatchesLlamaCpp/pycode_4m_q5_k_m_exact" 20
  "Models/Reference.MatchesLlamaCpp/pycode_4m_q6_k_exact" 20
  "Models/Reference.MatchesLlamaCpp/pycode_4m_q8_0_exact" 20
  "Models/Reference.MatchesLlamaCpp/pycode_600k_exact" 20
  "Models/Reference.MatchesLlamaCpp/pycode_600k_llamacpp" 20
  "NgramSource.CopiesFromThePromptAndFollowsAcceptedTokens" 20
  "NgramSource.ExtendsALoopPastTheEndOfTheText" 20
  "NgramSource.ProposeAloneKeepsTheIndexInStep" 20
  "NgramSource.RejectsBadK" 20
  "NgramSource.ResetForgetsThePreviousGeneration" 20
  "PreTokenizers.DeepSeek" 20
  "PreTokenizers.Llama3AndQwen2" 20
  "PreTokenizers.RandomTextRoundTrips" 20
  "Python.batch_example" 20
  "Python.example" 20
  "Python.rewind" 20
  "Q8Packed.ATokensOutputsDoNotDependOnThePassOrThreads" 20
  "Q8Packed.AgreesWithTheReference" 20
  "Q8Packed.EveryBodyGivesTheScalarModelsBits" 20
  "Q8Packed.ExtremeValuesDoNotSaturate" 20
  "Q8Packed.ManyOutputsGiveEachProductsBits" 20
  "Q8Packed.ManyOutputsRefuseBadInputBeforeComputing" 20
  "Q8Packed.MatmulUsesThePackedFormAtEveryLevel" 20
  "Q8Packed.RefusesBadInput" 20
  "Q8Packed.SizeMatchesTheOriginalUpToPadding" 20
  "Q8Packed.WidenedFormatsGiveTheFileLayoutsBits" 20
  "QuantFormats.BlockSizesAndRowBytes" 20
  "QuantFormats.DequantizeMatchesTheGgufLayout" 20
  "QuantFormats.QuantizeEdgeRows" 20
  "QuantFormats.QuantizeRefusesBadInput" 20
  "QuantFormats.QuantizeRoundTripsWithinTypeBounds" 20
  "ReferenceSource.CopiesFromTheReferenceThatHoldsTheLongestMatch" 20
  "ReferenceSource.RejectsBadReferences" 20
  "ReferenceSource.TokenizesTexts" 20
  "RmsNorm.BatchingInvariantAndInPlace" 20
  "RmsNorm.FollowsGgmlFloatRecipe" 20
  "RmsNorm.MatchesEigenReference" 20
  "RmsNorm.RejectsBadArguments" 20
  "Rope.BatchingInvariant" 20
  "Rope.LongHeadsUseTheSameRecurrence" 20
  "Rope.MatchesGgmlRecipeExactlyAndExactMathClosely" 20
  "Rope.PositionZeroIsIdentity" 20
  "Rope.RejectsBadArguments" 20
  "RopeExt.NeoxFactorsAndScalingMatchReference" 20
  "RopeExt.NormModeIsRopeNormBitForBit" 20
  "RopeExt.RejectsBadArguments" 20
  "Sampler.BadOptionsThrow" 20
  "Sampler.CounterUniformIsAPureFunction" 20
  "Sampler.DistributionSumsToOneAndSampleMatchesSampleFrom" 20
  "Sampler.DrawsFollowTheDistribution" 20
  "Sampler.FiltersRunInTheDocumentedOrder" 20
  "Sampler.GreedyMatchesThePlainScan" 20
  "Sampler.GreedyPicksLowestIdOnTies" 20
  "Sampler.MinPDropsTheUnlikely" 20
  "Sampler.RepetitionPenaltyFollowsLlamaCppRule" 20
  "Sampler.SamePositionSameTokenWhateverHappenedBefore" 20
  "Sampler.TemperatureScalesTheSoftmax" 20
  "Sampler.TopKKeepsTheKLargest" 20
  "Sampler.TopPKeepsTheSmallestSufficientPrefix" 20
  "Session.AppendGenerateAppendGenerateReusesEverything" 20
  "Session.ContextFullAndOverflow" 20
  "Session.SampledGenerationMatchesPlainToo" 20
  "Session.StopStringsAndCallbacks" 20
  "Simd.FeaturesAgreeWithProcCpuinfo" 20
  "Simd.LevelFollowsCpuinfo" 20
  "Simd.NamesAndBadLevels" 20
  "SimdLevels.DefaultIsTheCpusBestAndBadLevelsAreRefused" 20
  "SimdLevels.DenseFloatWeightsSameBitsWithinABodysOrder" 20
  "SimdLevels.KQuantModelsSameBitsAtEveryLevel" 20
  "SimdLevels.Q8_0PackedSameBitsAtEveryLevel" 20
  "SimdLevels.WideningAtLoadKeepsTheFileLayoutsBits" 20
  "Simde.AddBiasAndScale.Elementwise" 20
  "Simde.AddInplace.Adds" 20
  "Simde.Attention.EveryLevelGivesTheScalarModelsBits" 20
  "Simde.Attention.ExtremeScoresStayFinite" 20
  "Simde.Attention.FirstTokenReturnsItsValue" 20
  "Simde.Attention.LongPrefixTilesKeepEveryResult" 20
  "Simde.Attention.MatchesReference" 20
  "Simde.Attention.RejectsBadArguments" 20
  "Simde.Attention.ScaleOverridesTheDefault" 20
  "Simde.Attention.ScratchUptoCoversEveryCallOfACache" 20
  "Simde.Attention.SlidingWindow" 20
  "Simde.Attention.ThreadCountNeverChangesAResult" 20
  "Simde.Attention.TokenCountNeverChangesAResult" 20
  "Simde.Geglu.MatchesReferenceAndIsElementwise" 20
  "Simde.KqPacked.EveryBodyGivesTheFileLayoutsBits" 20
  "Simde.KqPacked.RefusesBadInput" 20
  "Simde.KqPacked.SharedInputGivesEachMatmulsBits" 20
  "Simde.KqPacked.SharedInputRefusesBadInput" 20
  "Simde.KqPacked.Sizes" 20
  "Simde.KqPacked.TokenAndThreadCountsNeverChangeAResult" 20
  "Simde.Matmul.DetectsALevelAndNamesIt" 20
  "Simde.Matmul.FloatBodiesMatchTheirScalarModelBitForBit" 20
  "Simde.Matmul.MatchesReference" 20
  "Simde.Matmul.Q8ActivationQuantizationFollowsTheRule" 20
  "Simde.Matmul.Q8WeightsMayHoldMinus128" 20
  "Simde.Matmul.RejectsBadArguments" 20
  "Simde.Matmul.ScalarOrderIsSequential" 20
  "Simde.Matmul.ThreadCountNeverChangesAResult" 20
  "Simde.Matmul.TokenCountNeverChangesAResult" 20
  "Simde.MatmulQuant.ActivationEdgeCasesAgreeAcrossLevels" 20
  "Simde.MatmulQuant.EveryBodyMatchesItsScalarModelBitForBit" 20
  "Simde.MatmulQuant.MatchesReference" 20
  "Simde.MatmulQuant.RefusesBadShapesAndScratch" 20
  "Simde.MatmulQuant.ThreadCountNeverChangesAResult" 20
  "Simde.MatmulQuant.TokenCountNeverChangesAResult" 20
  "Simde.Q8Packed.ATokensOutputsDoNotDependOnThePassOrThreads" 20
  "Simde.Q8Packed.AgreesWithTheReference" 20
  "Simde.Q8Packed.EveryBodyGivesTheScalarModelsBits" 20
  "Simde.Q8Packed.ExtremeValuesDoNotSaturate" 20
  "Simde.Q8Packed.ManyOutputsGiveEachProductsBits" 20
  "Simde.Q8Packed.ManyOutputsRefuseBadInputBeforeComputing" 20
  "Simde.Q8Packed.MatmulUsesThePackedFormAtEveryLevel" 20
  "Simde.Q8Packed.RefusesBadInput" 20
  "Simde.Q8Packed.SizeMatchesTheOriginalUpToPadding" 20
  "Simde.Q8Packed.WidenedFormatsGiveTheFileLayoutsBits" 20
  "Simde.RmsNorm.BatchingInvariantAndInPlace" 20
  "Simde.RmsNorm.FollowsGgmlFloatRecipe" 20
  "Simde.RmsNorm.MatchesEigenReference" 20
  "Simde.RmsNorm.RejectsBadArguments" 20
  "Simde.Rope.BatchingInvariant" 20
  "Simde.Rope.LongHeadsUseTheSameRecurrence" 20
  "Simde.Rope.MatchesGgmlRecipeExactlyAndExactMathClosely" 20
  "Simde.Rope.PositionZeroIsIdentity" 20
  "Simde.Rope.RejectsBadArguments" 20
  "Simde.RopeExt.NeoxFactorsAndScalingMatchReference" 20
  "Simde.RopeExt.NormModeIsRopeNormBitForBit" 20
  "Simde.RopeExt.RejectsBadArguments" 20
  "Simde.SimdLevels.DefaultIsTheCpusBestAndBadLevelsAreRefused" 20
  "Simde.SimdLevels.DenseFloatWeightsSameBitsWithinABodysOrder" 20
  "Simde.SimdLevels.KQuantModelsSameBitsAtEveryLevel" 20
  "Simde.SimdLevels.Q8_0PackedSameBitsAtEveryLevel" 20
  "Simde.SimdLevels.WideningAtLoadKeepsTheFileLayoutsBits" 20
  "Simde.Swiglu.ElementNeverDependsOnItsIndexOrCount" 20
  "Simde.Swiglu.EveryLevelGivesTheScalarModelsBits" 20
  "Simde.Swiglu.MatchesReference" 20
  "SourceFactory.BuildsEveryNamedSourceAndRefusesIncompleteOrIgnoredParts" 20
  "SpecialTokens.ByteLevelBpe" 20
  "SpecialTokens.EndOfGenerationSets" 20
  "SpecialTokens.Llama3ChatTurn" 20
  "SpecialTokens.LongestPieceWinsAndPhi3StripsWhitespaceAfter" 20
  "SpecialTokens.PaddingEntriesRenderAsNothing" 20
  "SpecialTokens.ParsedOnlyWhenAsked" 20
  "SpecialTokens.Phi3EndOfSentenceIsControlAsInLlamaCpp" 20
  "SpecialTokens.UserDefinedPiecesAlwaysMatch" 20
  "Speculative.DraftVocabularyMayDifferOnlyInPadding" 20
  "Speculative.GreedyRejectionModeIsExact" 20
  "Speculative.LosslessWithAdaptiveK" 20
  "Speculative.ReusesACachedPromptPrefixAndHandlesEdgeCases" 20
  "Speculative.RollbackLeavesTheCacheAsAReplayWould" 20
  "Speculative.SessionRefusesBadOptionsWithNothingChanged" 20
  "Speculative.SessionSpeculatesLosslessly" 20
  "Speculative.StatisticsAddUp" 20
  "Speculative.StopsExactlyWherePlainDecodingStops" 20
  "StopChecker.RulesAndPrecedence" 20
  "Swiglu.ElementNeverDependsOnItsIndexOrCount" 20
  "Swiglu.EveryLevelGivesTheScalarModelsBits" 20
  "Swiglu.MatchesReference" 20
  "Targets/FuzzRegressions.EveryInputIsHandled/gguf" 20
  "Targets/FuzzRegressions.EveryInputIsHandled/kv_state" 20
  "Targets/FuzzRegressions.EveryInputIsHandled/reference" 20
  "Targets/FuzzRegressions.EveryInputIsHandled/tokenizer" 20
  "Targets/FuzzRegressions.EveryInputIsHandled/workload" 20
  "ThreadPool.BackToBackJobsOfChangingShape" 20
  "ThreadPool.ConcurrentCallersShareAPool" 20
  "ThreadPool.DestroyWhileIdle" 20
  "ThreadPool.EachIndexOnceInGrainAlignedChunks" 20
  "ThreadPool.ExceptionInAnyChunkReachesCaller" 20
  "ThreadPool.ExceptionInCallerChunkWaitsForWorkers" 20
  "ThreadPool.ExceptionOnAWorkerThreadReachesCaller" 20
  "ThreadPool.ManyQuickDispatches" 20
  "ThreadPool.NestedCallRunsInline" 20
  "ThreadPool.ParallelRowsWithoutPool" 20
  "ThreadPool.RejectsBadSize" 20
  "ThreadPool.SizeCountsTheCaller" 20
  "ThreadPool.UsesSeveralThreads" 20
  "ThreadPool.WakesAfterSleeping" 20
  "TinyVocab.BpeLowestRankFirst" 20
  "TinyVocab.BpePreTokenizerSplits" 20
  "TinyVocab.SpmHighestScoreThenLeftmost" 20
  "TokenIndex.ClearForgetsEverything" 20
  "TokenIndex.DocumentsDoNotLeakIntoEachOther" 20
  "TokenIndex.FindsLongestSuffixAndItsContinuation" 20
  "TokenIndex.GrowsPastItsInitialTable" 20
  "TokenIndex.IncrementalUpdatesMatchABulkBuild" 20
  "TokenIndex.OverlappingCopyExtendsARepeatingPattern" 20
  "TokenIndex.RejectsBadInput" 20
  "TokenIndex.RespectsNMinAndNMax" 20
  "TokenIndex.TheNewestTokenHasNoContinuationYet" 20
  "Tokenizer.BosAndEmptyText" 20
  "Tokenizer.ByteMissingFromByteLevelVocabularyIsDropped" 20
  "Tokenizer.DraftAndTargetShareTheTokenizer" 20
  "Tokenizer.LeadingSpaceRuleWithSpacePrefix" 20
  "Tokenizer.LongInputRoundTrips" 20
  "Tokenizer.ReferencePromptIds" 20
  "Tokenizer.VocabKinds" 20
  "TokenizerErrors.BadTokenIds" 20
  "TokenizerErrors.FromGgufNamesFileAndKey" 20
  "TokenizerErrors.MissingOrInconsistentMetadata" 20
  "Utf8Stream.InvalidAndTruncatedSequencesBecomeReplacementChars" 20
  "Utf8Stream.MultibyteTextSplitAcrossByteTokens" 20
  "Vocab/VocabVectors.DecodeRoundTrips/gpt_2" 20
  "Vocab/VocabVectors.DecodeRoundTrips/llama_bpe" 20
  "Vocab/VocabVectors.DecodeRoundTrips/llama_spm" 20
  "Vocab/VocabVectors.DecodeRoundTrips/phi_3" 20
  "Vocab/VocabVectors.DecodeRoundTrips/qwen2" 20
  "Vocab/VocabVectors.DecodeRoundTrips/starcoder" 20
  "Vocab/VocabVectors.MatchLlamaCppIdForId/gpt_2" 20
  "Vocab/VocabVectors.MatchLlamaCppIdForId/llama_bpe" 20
  "Vocab/VocabVectors.MatchLlamaCppIdForId/llama_spm" 20
  "Vocab/VocabVectors.MatchLlamaCppIdForId/phi_3" 20
  "Vocab/VocabVectors.MatchLlamaCppIdForId/qwen2" 20
  "Vocab/VocabVectors.MatchLlamaCppIdForId/starcoder" 20
  "Vocab/VocabVectors.RandomTextRoundTrips/gpt_2" 20
  "Vocab/VocabVectors.RandomTextRoundTrips/llama_bpe" 20
  "Vocab/VocabVectors.RandomTextRoundTrips/llama_spm" 20
  "Vocab/VocabVectors.RandomTextRoundTrips/phi_3" 20
  "Vocab/VocabVectors.RandomTextRoundTrips/qwen2" 20
  "Vocab/VocabVectors.RandomTextRoundTrips/starcoder" 20
  "Vocab/VocabVectors.StreamDecodingEqualsDecode/gpt_2" 20
  "Vocab/VocabVectors.StreamDecodingEqualsDecode/llama_bpe" 20
  "Vocab/VocabVectors.StreamDecodingEqualsDecode/llama_spm" 20
  "Vocab/VocabVectors.StreamDecodingEqualsDecode/phi_3" 20
  "Vocab/VocabVectors.StreamDecodingEqualsDecode/qwen2" 20
  "Vocab/VocabVectors.StreamDecodingEqualsDecode/starcoder" 20
  # Not listed (the default): the GPU tests, which skipped on this machine without one, so their
  # time was not measured:
  #   CudaAttention.MatchesCpuReferenceAndIsQueryCountInvariant
  #   CudaBackend.LogitsAgreeWithTheCpuOnSharedModels
  #   CudaBackend.QueryCountInvariantBitForBit
  #   CudaBackend.SpeculativeDecodingIsLosslessOnTheDevice
  #   CudaBackend.TruncateForkSaveLoadAndCpuWrittenCachesRoundTrip
  #   CudaMatmul.MatchesCpuReferenceAndIsQueryCountInvariant
  #   CudaOps.ArgmaxTakesTheLowestIndexOnTiesAndSkipsNaN
  #   CudaOps.ElementwiseOpsMatchCpuExactly
  #   CudaOps.GatedActivationsMatchCpuWithStrides
  #   CudaOps.GetRowsOfEveryTypeIsTheCpuDequantisation
  #   CudaOps.RmsNormMatchesCpuAndRowsAreIndependent
  #   CudaOps.RopeBothModesWithFactorsMatchCpu
  #   CudaOps.StoreKvRoundsToHalfAsTheCpu
  #   Device.LlamaCppNumericsAreCpuOnly
  #   Device.OutOfRangeOrdinalIsRefused
)
