// swift-tools-version: 6.0
import PackageDescription

// Dependencies are the offline copies listed in the machine notes; keep this list short:
// CI builds every one of them from scratch on each run.

// Runtime exclusivity checks off in the two wire modules (every byte a reply appends goes through a class
// property), only when asked: IAP_UNCHECKED_EXCLUSIVITY=1, which compose/build.sh (compose/up.sh, the
// Docker image) and Benchmarks/run-suite.sh set. Measured on the 2-core VM, release, same run
// (Benchmarks/README.md): catalog.listProducts 28-37k/s with the flag vs 25-27k/s without, rpc.ping 54-66k/s
// vs 42-52k/s. Not in the default manifest: `unsafeFlags` would stop any other package from depending on
// these libraries by version. Static exclusivity checks apply either way.
let uncheckedExclusivity: [SwiftSetting] =
    Context.environment["IAP_UNCHECKED_EXCLUSIVITY"] == "1" ? [.unsafeFlags(["-enforce-exclusivity=unchecked"])] : []
let package = Package(
    name: "iap-server",
    platforms: [.macOS(.v15)],
    products: [
        .library(name: "JSONRPC", targets: ["JSONRPC"]),
        .library(name: "IAPProtocol", targets: ["IAPProtocol"]),
        .library(name: "RPCTransport", targets: ["RPCTransport"]),
        .executable(name: "accounts-service", targets: ["AccountsServiceMain"]),
        .executable(name: "catalog-service", targets: ["CatalogServiceMain"]),
        .executable(name: "verification-service", targets: ["VerificationServiceMain"]),
        .executable(name: "fulfillment-service", targets: ["FulfillmentServiceMain"]),
        .executable(name: "appstore-sim", targets: ["AppStoreSimulatorMain"]),
        .executable(name: "play-sim", targets: ["PlaySimulatorMain"]),
        .executable(name: "edge-service", targets: ["EdgeServiceMain"]),
        .executable(name: "console-service", targets: ["ConsoleServiceMain"]),
        .executable(name: "iap", targets: ["IAPCLI"]),
        .executable(name: "iap-bench", targets: ["IAPBench"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-metrics", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", from: "2.13.0"),
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/groue/GRDB.swift", from: "7.10.0"),
        .package(url: "https://github.com/apple/swift-crypto", from: "4.5.2"),
        .package(url: "https://github.com/apple/swift-certificates", from: "1.21.1"),
        .package(url: "https://github.com/apple/swift-asn1", from: "1.7.4"),
        .package(url: "https://github.com/hummingbird-project/hummingbird", from: "2.28.1"),
        .package(url: "https://github.com/swift-server/async-http-client", from: "1.37.0"),
        // Already in the build through async-http-client; the edge's TLS.
        .package(url: "https://github.com/apple/swift-nio-ssl", from: "2.37.6"),
        // Already in the build through hummingbird; the edge's HTTP part types for its request-head deadline.
        .package(url: "https://github.com/apple/swift-nio-extras", from: "1.35.2"),
        // /metrics in Prometheus's text format (small: swift-metrics and swift-atomics, both in the build already).
        .package(url: "https://github.com/swift-server/swift-prometheus", from: "2.4.1"),
        // PostgreSQL (`--database-url`): the stores of accounts, catalog and fulfillment on a shared server.
        .package(url: "https://github.com/vapor/postgres-nio", from: "1.33.2"),
        // The support console's pages: logic-less templates that escape every value by default (no other dependencies).
        .package(url: "https://github.com/hummingbird-project/swift-mustache", from: "2.1.1"),
    ],
    targets: [
        // Wire types: JSON scanning, the JSON-RPC envelope, errors, method descriptors, schemas. No I/O.
        .target(name: "JSONRPC", path: "Shared/JSONRPC", swiftSettings: uncheckedExclusivity),
        // The method contract (docs/contract.md): one descriptor per method.
        .target(name: "IAPProtocol", dependencies: ["JSONRPC"], path: "Shared/IAPProtocol"),
        // Server and client on SwiftNIO.
        .target(
            name: "RPCTransport",
            dependencies: [
                "JSONRPC",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "CoreMetrics", package: "swift-metrics"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            path: "Shared/RPCTransport",
            swiftSettings: uncheckedExclusivity
        ),
        // App receipts (PKCS#7) and StoreKit 2 JWS: parse, verify, build. Used by the verification
        // service, the simulator and tests.
        .target(
            name: "Receipts",
            dependencies: [
                "JSONRPC",
                .product(name: "SwiftASN1", package: "swift-asn1"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "CryptoExtras", package: "swift-crypto"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
            ],
            path: "Shared/Receipts"
        ),

        // Apple's App Store Server API: typed calls, tokens, retries, paging; every payload verified (Receipts).
        .target(
            name: "AppStoreServerAPI",
            dependencies: [
                "JSONRPC", "IAPProtocol", "Receipts",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
            ],
            path: "Shared/AppStoreServerAPI"
        ),

        // Google's Play Developer API: service-account tokens, purchases, acknowledgements.
        .target(
            name: "PlayDeveloperAPI",
            dependencies: [
                "JSONRPC", .product(name: "AsyncHTTPClient", package: "async-http-client"), .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "CryptoExtras", package: "swift-crypto"), .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"), .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
            ],
            path: "Shared/PlayDeveloperAPI"
        ),

        // A pool of PostgreSQL connections for the synchronous store code, retries, versioned migrations.
        .target(
            name: "PostgresSupport",
            dependencies: [
                "JSONRPC", .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Logging", package: "swift-log"),
            ],
            path: "Shared/Postgres"
        ),

        // Flags, environment and clocks shared by the service executables.
        .target(
            name: "ServiceSupport",
            dependencies: [
                "RPCTransport", "JSONRPC",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "CoreMetrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            path: "Shared/ServiceSupport"
        ),

        // edge: the one public door (JSON-RPC over HTTP, Apple's notification webhook).
        .target(
            name: "EdgeService",
            dependencies: [
                "JSONRPC", "IAPProtocol", "RPCTransport", "ServiceSupport",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdCore", package: "hummingbird"),
                .product(name: "HummingbirdHTTP2", package: "hummingbird"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "CoreMetrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "NIOHTTPTypes", package: "swift-nio-extras"),
                .product(name: "NIOHTTPTypesHTTP1", package: "swift-nio-extras"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
            ],
            path: "Services/Edge/EdgeService"
        ),
        .executableTarget(
            name: "EdgeServiceMain",
            dependencies: [
                "EdgeService", "RPCTransport", "ServiceSupport",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            path: "Services/Edge/Main"
        ),

        // accounts: users, password login, sessions, appAccountToken.
        .target(
            name: "AccountsService",
            dependencies: [
                "JSONRPC", "IAPProtocol", "RPCTransport", "ServiceSupport", "PostgresSupport",
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "CryptoExtras", package: "swift-crypto"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
            ],
            path: "Services/Accounts/AccountsService"
        ),
        .executableTarget(
            name: "AccountsServiceMain",
            dependencies: [
                "AccountsService", "IAPProtocol", "RPCTransport", "ServiceSupport", "PostgresSupport",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            path: "Services/Accounts/Main"
        ),

        // catalog: products, grants, localized text, prices per storefront, the price cache.
        .target(
            name: "CatalogService",
            dependencies: [
                "JSONRPC", "IAPProtocol", "RPCTransport", "ServiceSupport", "PostgresSupport", .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "PostgresNIO", package: "postgres-nio"), .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"), .product(name: "Logging", package: "swift-log"),
            ],
            path: "Services/Catalog/CatalogService"
        ),
        .executableTarget(
            name: "CatalogServiceMain",
            dependencies: [
                "CatalogService", "IAPProtocol", "RPCTransport", "ServiceSupport", "PostgresSupport",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            path: "Services/Catalog/Main"
        ),

        // verification: receipts and signed transactions, checked locally.
        .target(
            name: "VerificationService",
            dependencies: [
                "AppStoreServerAPI", "PlayDeveloperAPI", "ServiceSupport",
                "JSONRPC", "IAPProtocol", "RPCTransport", "Receipts",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
            ],
            path: "Services/Verification/VerificationService"
        ),
        .executableTarget(
            name: "VerificationServiceMain",
            dependencies: [
                "VerificationService", "Receipts", "RPCTransport", "ServiceSupport", "AppStoreServerAPI", "PlayDeveloperAPI",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            path: "Services/Verification/Main"
        ),

        // appstore-sim: the local App Store stand-in (development and tests).
        // fulfillment: exactly-once grants, the coin ledger, entitlements, restores, content.
        .target(
            name: "FulfillmentService",
            dependencies: [
                "JSONRPC", "IAPProtocol", "RPCTransport", "ServiceSupport", "Receipts", "PostgresSupport",
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                // Webhook deliveries (already in the build through verification).
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "CoreMetrics", package: "swift-metrics"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            path: "Services/Fulfillment/FulfillmentService"
        ),
        .executableTarget(
            name: "FulfillmentServiceMain",
            dependencies: [
                "FulfillmentService", "RPCTransport", "ServiceSupport", "PostgresSupport",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "NIOCore", package: "swift-nio"),
            ],
            path: "Services/Fulfillment/Main"
        ),

        .target(
            name: "AppStoreSimulator",
            dependencies: [
                "JSONRPC", "IAPProtocol", "RPCTransport", "Receipts", "ServiceSupport", "VerificationService",
                .product(name: "Hummingbird", package: "hummingbird"), .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"), .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"), .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "Crypto", package: "swift-crypto"), .product(name: "CryptoExtras", package: "swift-crypto"),
                .product(name: "X509", package: "swift-certificates"), .product(name: "SwiftASN1", package: "swift-asn1"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
            ],
            path: "Services/AppStoreSimulator/AppStoreSimulator"
        ),
        .executableTarget(
            name: "AppStoreSimulatorMain",
            dependencies: [
                "AppStoreSimulator", "RPCTransport", "ServiceSupport",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Logging", package: "swift-log"),
            ],
            path: "Services/AppStoreSimulator/Main"
        ),

        // play-sim: the local Google Play stand-in (development and tests).
        .target(
            name: "PlaySimulator",
            dependencies: [
                "JSONRPC", "IAPProtocol", "RPCTransport", "ServiceSupport", .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"), .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"), .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "GRDB", package: "GRDB.swift"), .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "CryptoExtras", package: "swift-crypto"), .product(name: "X509", package: "swift-certificates"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"), .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
            ], path: "Services/PlaySimulator/PlaySimulator"
        ),
        .executableTarget(
            name: "PlaySimulatorMain",
            dependencies: [
                "PlaySimulator", "IAPProtocol", "RPCTransport", "ServiceSupport",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"), .product(name: "Logging", package: "swift-log"),
            ],
            path: "Services/PlaySimulator/Main"
        ),

        // The `iap` client CLI.
        // console: the support console, web pages for the people who answer customers (operators, roles, TOTP).
        .target(
            name: "ConsoleService",
            dependencies: [
                "JSONRPC", "IAPProtocol", "RPCTransport", "ServiceSupport", "PostgresSupport",
                // The same scrypt hasher and sign-in limits as accounts'.
                "AccountsService",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdTLS", package: "hummingbird"),
                .product(name: "Mustache", package: "swift-mustache"),
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
            ],
            path: "Services/Console/ConsoleService"
        ),
        .executableTarget(
            name: "ConsoleServiceMain",
            dependencies: [
                "ConsoleService", "RPCTransport", "ServiceSupport", "PostgresSupport",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Logging", package: "swift-log"),
            ],
            path: "Services/Console/Main"
        ),

        .executableTarget(
            name: "IAPCLI",
            dependencies: [
                "JSONRPC", "IAPProtocol", "RPCTransport", "Receipts", "ServiceSupport", "VerificationService", "ConsoleService", "AccountsService",
                "PostgresSupport", "AppStoreServerAPI",
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
            ],
            path: "Tools/iap"
        ),

        .executableTarget(
            name: "IAPBench",
            dependencies: [
                "JSONRPC", "IAPProtocol", "RPCTransport", "Receipts", "ServiceSupport", "PostgresSupport",
                .product(name: "AsyncHTTPClient", package: "async-http-client"), .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                // The Play benchmarks' receivers; the event benchmarks' webhook receiver is plain NIO (NIOHTTP1).
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "NIOCore", package: "swift-nio"), .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"), .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
            ],
            path: "Benchmarks/IAPBench"
        ),
        // Test support: golden-file runner and contract harness, over real TCP.
        .target(
            name: "RPCTestSupport",
            dependencies: [
                "JSONRPC", "RPCTransport", .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
            ],
            path: "Tests/Support"
        ),
        .testTarget(
            name: "JSONRPCTests",
            dependencies: ["JSONRPC", "IAPProtocol"],
            path: "Tests/JSONRPCTests"
        ),
        .testTarget(
            name: "RPCTransportTests",
            dependencies: [
                "JSONRPC", "IAPProtocol", "RPCTransport", "RPCTestSupport",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "MetricsTestKit", package: "swift-metrics"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            path: "Tests/RPCTransportTests",
            exclude: ["Conformance"]
        ),
        .testTarget(
            name: "AccountsServiceTests",
            dependencies: [
                "AccountsService", "IAPProtocol", "JSONRPC", "RPCTransport", "RPCTestSupport", "ServiceSupport", "PostgresSupport",
                "VerificationService", "Receipts",
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "Logging", package: "swift-log"),
            ],
            path: "Tests/AccountsServiceTests"
        ),
        .testTarget(
            name: "ReceiptsTests",
            dependencies: [
                "Receipts", .product(name: "X509", package: "swift-certificates"),
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            path: "Tests/ReceiptsTests",
            exclude: ["Fixtures"]
        ),
        .testTarget(
            name: "VerificationServiceTests",
            dependencies: [
                "VerificationService", "Receipts", "IAPProtocol", "JSONRPC", "RPCTransport", "RPCTestSupport", "AppStoreServerAPI",
                "PlayDeveloperAPI",
                .product(name: "Logging", package: "swift-log"),
            ],
            path: "Tests/VerificationServiceTests"
        ),
        .testTarget(
            name: "CLITests",
            dependencies: [
                "JSONRPC", "IAPProtocol", "VerificationService", "AppStoreSimulator", "RPCTransport", "RPCTestSupport", "Receipts",
                "SuiteTestSupport", .product(name: "Logging", package: "swift-log"),
            ],
            path: "Tests/CLITests"
        ),
        .testTarget(
            name: "AppStoreSimulatorTests",
            dependencies: [
                "AppStoreSimulator", "VerificationService", "Receipts", "IAPProtocol", "JSONRPC", "RPCTransport", "RPCTestSupport",
                "ServiceSupport", .product(name: "Crypto", package: "swift-crypto"), .product(name: "X509", package: "swift-certificates"),
                .product(name: "Hummingbird", package: "hummingbird"), .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
            ],
            path: "Tests/AppStoreSimulatorTests"
        ),
        .testTarget(
            name: "PlaySimulatorTests",
            dependencies: [
                "PlaySimulator", "IAPProtocol", "JSONRPC", "RPCTransport", "RPCTestSupport", "ServiceSupport",
                .product(name: "Hummingbird", package: "hummingbird"), .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
            ],
            path: "Tests/PlaySimulatorTests"
        ),
        .testTarget(
            name: "AppStoreServerAPITests",
            dependencies: [
                "AppStoreServerAPI", "AppStoreSimulator", "Receipts", "IAPProtocol", "JSONRPC", "RPCTestSupport", "ServiceSupport",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
            ],
            path: "Tests/AppStoreServerAPITests"
        ),
        .testTarget(
            name: "PostgresSupportTests",
            dependencies: ["PostgresSupport"],
            path: "Tests/PostgresSupportTests"
        ),
        .testTarget(
            name: "ServiceSupportTests",
            dependencies: ["ServiceSupport", .product(name: "NIOConcurrencyHelpers", package: "swift-nio")],
            path: "Tests/ServiceSupportTests"
        ),
        .testTarget(
            name: "CatalogServiceTests",
            dependencies: [
                "CatalogService", "IAPProtocol", "JSONRPC", "RPCTransport", "RPCTestSupport", "ServiceSupport", "PostgresSupport",
                .product(name: "Logging", package: "swift-log"),
            ],
            path: "Tests/CatalogServiceTests"
        ),
        // Test support: the whole suite in one process, each service on its own port.
        .target(
            name: "SuiteTestSupport",
            dependencies: [
                "FulfillmentService", "AccountsService", "CatalogService", "VerificationService", "AppStoreSimulator", "PlaySimulator",
                "PlayDeveloperAPI", "EdgeService", "IAPProtocol", "JSONRPC", "RPCTransport", "RPCTestSupport", "ServiceSupport", "AppStoreServerAPI",
                "Receipts",
                "PostgresSupport",
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                // A webhook receiver on a real port (WebhookReceiver).
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
            ],
            path: "Tests/SuiteSupport"
        ),
        .testTarget(
            name: "FulfillmentServiceTests",
            dependencies: [
                "FulfillmentService", "SuiteTestSupport",
                "IAPProtocol", "JSONRPC", "RPCTransport", "RPCTestSupport", "ServiceSupport",
                "PostgresSupport", .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
                // The Standard Webhooks judge's control requests.
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
            ],
            path: "Tests/FulfillmentServiceTests",
            exclude: ["Fixtures"]
        ),
        .testTarget(
            name: "EdgeServiceTests",
            dependencies: [
                "EdgeService", "FulfillmentService", "AccountsService", "SuiteTestSupport", "IAPProtocol", "JSONRPC", "RPCTransport",
                "RPCTestSupport", "AppStoreServerAPI", "Receipts", "PlaySimulator",
                "ServiceSupport",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
                .product(name: "NIOHTTPTypes", package: "swift-nio-extras"),
            ],
            path: "Tests/EdgeServiceTests"
        ),
        .testTarget(
            name: "ConsoleServiceTests",
            dependencies: [
                "ConsoleService", "SuiteTestSupport", "IAPProtocol", "JSONRPC", "RPCTransport", "RPCTestSupport", "ServiceSupport",
                "AccountsService", "PostgresSupport",
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
            ],
            path: "Tests/ConsoleServiceTests"
        ),
        .testTarget(
            name: "ComposeTests",
            dependencies: ["ServiceSupport", "RPCTestSupport"],
            path: "Tests/ComposeTests"
        ),
        .testTarget(
            name: "ReliabilityTests",
            dependencies: [
                "SuiteTestSupport", "FulfillmentService", "EdgeService", "IAPProtocol", "JSONRPC", "RPCTransport", "RPCTestSupport",
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
            ],
            path: "Tests/ReliabilityTests"
        ),
    ],
    swiftLanguageModes: [.v6]
)
