import ArgumentParser

/// The suite's benchmark tool. Each scenario is a subcommand; see Benchmarks/README.md.
@main
struct IAPBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "iap-bench",
        abstract: "Benchmarks for the in-app purchase suite.",
        subcommands: [
            PingBenchmark.self, CatalogListBenchmark.self, AuthenticateBenchmark.self, VerifyReceiptBenchmark.self,
            RedeemBenchmark.self, SpendBenchmark.self, MixedBenchmark.self, PreloadBenchmark.self, HostileBenchmark.self, ServeFixture.self,
            LoginLatency.self, MintReceipt.self, FuzzReceipts.self, EdgeRPCBenchmark.self, DownloadBenchmark.self, ContentURLCommand.self,
            WebhookBenchmark.self, OffersBenchmark.self, VerifyTransactionBenchmark.self, WebhookDeliveryBenchmark.self, EventTailBenchmark.self,
            RetentionBenchmark.self, PlayWebhookBenchmark.self, PostgresRoundTripsBenchmark.self,
        ])
}
