import ArgumentParser
import Foundation
import IAPProtocol
import JSONRPC
import NIOConcurrencyHelpers
import RPCTransport

/// Maps a thrown error to the load driver's outcome.
func outcome(_ body: () async throws -> Void) async -> CallOutcome {
    do {
        try await body()
        return .ok
    } catch let error as RPCError {
        return .failed(code: error.code)
    } catch {
        return .failed(code: CallOutcome.otherError)
    }
}

func clients(_ address: String, _ n: Int) throws -> [RPCClient] {
    try (0..<n).map { _ in try RPCClient(address: address, configuration: .init(connections: 1, callTimeout: .seconds(30))) }
}

/// `rpc.ping` against any service.
struct PingBenchmark: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "ping", abstract: "rpc.ping against any service (transport overhead only).")
    @Option(help: "Service address.") var addr = "127.0.0.1:7102"
    @OptionGroup var load: LoadOptions

    func run() async throws {
        let pool = try clients(addr, load.connections)
        let driver = LoadDriver(options: load)
        driver.print(
            try await driver.run(scenario: "ping \(addr)", clients: pool) { client, _ in
                await outcome { _ = try await client.call(RPCPing.self, EmptyParams()) }
            })
        for c in pool { await c.close() }
    }
}

/// `catalog.listProducts` for one storefront (the catalog's listing cache answers).
struct CatalogListBenchmark: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "catalog-list", abstract: "catalog.listProducts, USA, en-US.")
    @Option(help: "catalog-service address.") var catalog = SuiteAddresses.env("IAP_CATALOG_ADDR", "127.0.0.1:7102")
    @OptionGroup var load: LoadOptions

    func run() async throws {
        let pool = try clients(catalog, load.connections)
        let driver = LoadDriver(options: load)
        let params = CatalogListProducts.Params(storefront: "USA", locale: "en-US")
        driver.print(
            try await driver.run(scenario: "catalog-list", clients: pool) { client, _ in
                await outcome { _ = try await client.callRaw(method: CatalogListProducts.name, params: try JSONWriter.encodeBodyOrThrow(params)) }
            })
        for c in pool { await c.close() }
    }
}

/// `accounts.authenticate` with one session token (what every fulfillment call costs accounts).
struct AuthenticateBenchmark: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "authenticate", abstract: "accounts.authenticate with a valid session.")
    @OptionGroup var suite: SuiteAddresses
    @OptionGroup var load: LoadOptions

    func run() async throws {
        let session = try await suite.signIn(run: String(UUID().uuidString.prefix(8)).lowercased())[0]
        let pool = try clients(suite.accounts, load.connections)
        let driver = LoadDriver(options: load)
        driver.print(
            try await driver.run(scenario: "authenticate", clients: pool) { client, _ in
                await outcome {
                    _ = try await client.call(AccountsAuthenticate.self, .init(session: session, internalToken: suite.resolvedInternalToken))
                }
            })
        for c in pool { await c.close() }
    }
}

/// `verification.verifyReceipt` of a simulator receipt holding N purchases, SHA-1 or SHA-256.
struct VerifyReceiptBenchmark: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "verify-receipt",
        abstract: "verification.verifyReceipt of a receipt minted by the simulator, or of the receipt files in --receipts.")
    @OptionGroup var suite: SuiteAddresses
    @Option(help: "verification-service address.") var verification = SuiteAddresses.env("IAP_VERIFICATION_ADDR", "127.0.0.1:7103")
    @Option(name: .customLong("in-app"), help: "Purchases in the receipt (e.g. 1, 5, 50).") var inApp = 5
    @Option(help: "sha256 or sha1.") var digest = "sha256"
    @Option(
        help: """
            Verify these receipt files instead of minting one (every regular file in the directory, DER or base64, taken \
            in turn; no simulator needed). Each must verify (status 0): Xcode receipts need a verification-service \
            started with --allow-xcode.
            """)
    var receipts: String?
    @Flag(name: .customLong("no-openssl"), help: "Skip the `openssl speed rsa2048` comparison.") var noOpenSSL = false
    @Flag(help: "Drive the load on NIO's event loops, no task per call (less of the shared cores for the load generator).")
    var pipelined = false
    @OptionGroup var load: LoadOptions

    func run() async throws {
        let bodies: [[UInt8]]
        var notes: [String: String]
        if let receipts {
            let files = try ReceiptFiles.load(directory: receipts)
            bodies = try files.map { try JSONWriter.encodeBodyOrThrow(VerificationVerifyReceipt.Params(receiptData: $0.base64)) }
            notes = ["receipts": files.map { "\($0.name) (\($0.bytes) bytes)" }.joined(separator: ", ") + ", in turn"]
        } else {
            let receipt = try await mintReceipt()
            bodies = [try JSONWriter.encodeBodyOrThrow(VerificationVerifyReceipt.Params(receiptData: receipt))]
            notes = ["receipt": "\(inApp) purchases, \(digest), \(receipt.utf8.count) base64 bytes"]
        }
        let driver = LoadDriver(options: load)
        if !noOpenSSL { notes["peer"] = OpenSSLSpeed.peerNote("rsa2048") }
        if pipelined {
            return try await driver.runVerification(
                "verify-receipt", address: verification, method: VerificationVerifyReceipt.name, bodies: bodies, notes: notes)
        }
        let pool = try clients(verification, load.connections)
        driver.print(
            try await driver.run(scenario: "verify-receipt", clients: pool, notes: notes) { client, i in
                await outcome {
                    let raw = try await client.callRaw(method: VerificationVerifyReceipt.name, params: bodies[i % bodies.count])
                    guard raw.starts(with: Array(#"{"status":0"#.utf8)) else { throw RPCError.internalError("status not 0") }
                }
            })
        for c in pool { await c.close() }
    }

    /// Buys `inApp` consumables for a new Apple ID in the simulator and asks for its receipt (base64).
    private func mintReceipt() async throws -> String {
        guard let simDigest = SimDigest(rawValue: digest) else { throw ValidationError("--digest must be sha256 or sha1") }
        let sim = try RPCClient(address: suite.sim, configuration: .init(connections: 1, callTimeout: .seconds(60)))
        let appleId = "bench-verify-\(UUID().uuidString.prefix(8))@icloud"
        for i in 0..<inApp {
            _ = try await sim.call(
                SimPurchase.self,
                .init(
                    appleId: appleId, bundleId: suite.bundleId, productId: "coins.\(i % 2 == 0 ? 100 : 1000)",
                    productType: .consumable))
        }
        let receipt = try await sim.call(
            SimReceipt.self,
            .init(
                appleId: appleId, bundleId: suite.bundleId,
                receipt: .init(digest: simDigest))
        ).receiptData
        await sim.close()
        return receipt
    }
}

/// Receipt files for `verify-receipt --receipts`: every regular file of a directory, by name, as base64 (a file
/// that is base64 text already is taken as it is; anything else is taken as the DER bytes).
enum ReceiptFiles {
    struct File {
        let name: String
        let bytes: Int
        let base64: String
    }

    static func load(directory: String) throws -> [File] {
        let url = URL(fileURLWithPath: directory)
        let names = try FileManager.default.contentsOfDirectory(atPath: url.path).sorted()
        var files: [File] = []
        for name in names where !name.hasPrefix(".") {
            let fileURL = url.appendingPathComponent(name)
            guard (try? fileURL.resourceValues(forKeys: [.isRegularFileKey]))?.isRegularFile == true else { continue }
            let data = try Data(contentsOf: fileURL)
            let text = String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
            if let der = Data(base64Encoded: text), !der.isEmpty {
                files.append(File(name: name, bytes: der.count, base64: text))
            } else {
                files.append(File(name: name, bytes: data.count, base64: data.base64EncodedString()))
            }
        }
        guard !files.isEmpty else { throw ValidationError("no receipt files in \(directory)") }
        return files
    }
}

/// `verification.verifyTransaction` of StoreKit 2 JWS minted by the simulator (taken in turn; verification
/// caches no answers, only the chain's validity), with OpenSSL's single-core ECDSA P-256 verify rate from the
/// same run: the issue's ratio in one command.
struct VerifyTransactionBenchmark: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "verify-transaction",
        abstract: "verification.verifyTransaction of simulator-signed JWS, beside `openssl speed ecdsap256` (needs the running suite).")
    @OptionGroup var suite: SuiteAddresses
    @Option(help: "verification-service address.") var verification = SuiteAddresses.env("IAP_VERIFICATION_ADDR", "127.0.0.1:7103")
    @Option(help: "Signed transactions to mint before timing (used in turn).") var transactions = 1_000
    @Flag(name: .customLong("no-openssl"), help: "Skip the `openssl speed` comparison.") var noOpenSSL = false
    @Flag(help: "Drive the load on NIO's event loops, no task per call (less of the shared cores for the load generator).")
    var pipelined = false
    @OptionGroup var load: LoadOptions

    func run() async throws {
        try await suite.silenceSimulatorNotifications()
        let runId = String(UUID().uuidString.prefix(8)).lowercased()
        FileHandle.standardError.write(Data("minting \(transactions) signed transactions...\n".utf8))
        let minted = try await suite.mint(count: transactions, productId: "coins.100", type: .consumable, run: runId)
        let bodies = try minted.map {
            try JSONWriter.encodeBodyOrThrow(VerificationVerifyTransaction.Params(signedTransaction: $0.signedTransaction))
        }
        let driver = LoadDriver(options: load)
        var notes = ["jws": "one new simulator-signed transaction per call (ES256, x5c of three)"]
        if !noOpenSSL { notes["peer"] = OpenSSLSpeed.peerNote("ecdsap256") }
        if pipelined {
            return try await driver.runVerification(
                "verify-transaction", address: verification, method: VerificationVerifyTransaction.name, bodies: bodies, notes: notes)
        }
        let pool = try clients(verification, load.connections)
        let report = try await driver.run(scenario: "verify-transaction", clients: pool, notes: notes) { client, i in
            await outcome {
                let raw = try await client.callRaw(method: VerificationVerifyTransaction.name, params: bodies[i % bodies.count])
                guard raw.starts(with: Array(#"{"status":0"#.utf8)) else { throw RPCError.internalError("status not 0") }
            }
        }
        driver.print(report)
        for c in pool { await c.close() }
    }
}

/// `openssl speed -seconds 3 ALGORITHM`'s verify/s on one core, read from its summary table; nil when
/// openssl is not installed or prints something else.
enum OpenSSLSpeed {
    /// The `peer` line of a verification scenario; nil when openssl could not say.
    static func peerNote(_ algorithm: String) -> String? {
        verifyRate(algorithm).map { "openssl speed \(algorithm), one core: \($0) verify/s (same run, before timing)" }
    }

    static func verifyRate(_ algorithm: String) -> Int? {
        // Through a shell into a file: openssl speed's output is read once it has exited.
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("openssl-speed-\(UUID().uuidString).txt")
        defer { try? FileManager.default.removeItem(at: file) }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/bin/sh")
        // Bounded: an openssl started with SIGALRM blocked (its timer) would never stop by itself.
        process.arguments = ["-c", "timeout 30 openssl speed -seconds 3 \(algorithm) >'\(file.path)' 2>/dev/null </dev/null"]
        guard (try? process.run()) != nil else { return nil }
        process.waitUntilExit()
        // The last line: "... <sign> <verify> <sign/s> <verify/s>".
        guard process.terminationStatus == 0, let text = try? String(contentsOf: file, encoding: .utf8),
            let line = text.split(separator: "\n").last, let rate = line.split(separator: " ").last.flatMap({ Double($0) })
        else { return nil }
        return Int(rate)
    }
}

extension LoadDriver {
    /// A verification scenario on the pipelined driver: request `i` is `bodies[i % count]`; status 0 answers count.
    func runVerification(_ scenario: String, address: String, method: String, bodies: [[UInt8]], notes: [String: String]) async throws {
        print(
            try await runPipelined(
                scenario: scenario, address: address, method: method, notes: notes, params: { bodies[$0 % bodies.count] },
                expect: Array(#"{"status":0"#.utf8)))
    }
}

/// A realistic blend: 70% reads (catalog listing, entitlements), 20% redeems of new purchases, 10% spends.
struct MixedBenchmark: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "mixed",
        abstract: "70% catalog/entitlement reads, 20% redeems (new purchases), 10% spends.")
    @OptionGroup var suite: SuiteAddresses
    @Option(help: "catalog-service address.") var catalog = SuiteAddresses.env("IAP_CATALOG_ADDR", "127.0.0.1:7102")
    @Option(help: "Purchases to mint before timing.") var purchases = 6_000
    @OptionGroup var load: LoadOptions

    func run() async throws {
        let runId = String(UUID().uuidString.prefix(8)).lowercased()
        FileHandle.standardError.write(Data("signing in \(suite.users) accounts, minting \(purchases) purchases...\n".utf8))
        let sessions = try await suite.signIn(run: runId)
        let minted = try await suite.mint(count: purchases, productId: "coins.100", type: .consumable, run: runId)
        let fulfillment = try suite.fulfillmentClients(load.connections)
        let catalogs = try clients(catalog, load.connections)
        let nextPurchase = NIOLockedValueBox(0)
        let listing = try JSONWriter.encodeBodyOrThrow(CatalogListProducts.Params(storefront: "USA"))
        let driver = LoadDriver(options: load)
        let report = try await driver.run(scenario: "mixed", clients: fulfillment) { client, i in
            let session = sessions[i % sessions.count]
            switch i % 10 {
            case 0, 1:
                let p = nextPurchase.withLockedValue { v in
                    defer { v += 1 }; return v
                }
                guard p < minted.count else { return nil }
                return await outcome {
                    _ = try await client.call(
                        FulfillmentRedeem.self,
                        .init(
                            session: sessions[p % sessions.count],
                            receiptData: minted[p].receiptData))
                }
            case 2:
                let spent = await outcome {
                    _ = try await client.call(
                        FulfillmentSpendCoins.self,
                        .init(
                            session: session, amount: 1, idempotencyKey: "mixed-\(runId)-\(i)"))
                }
                if case .failed(let code) = spent, code == RPCErrorCode.insufficientFunds.rawValue { return .ok }  // a valid answer
                return spent
            case 3, 4, 5, 6:
                let c = catalogs[i % catalogs.count]
                return await outcome { _ = try await c.callRaw(method: CatalogListProducts.name, params: listing) }
            default:
                return await outcome { _ = try await client.call(FulfillmentGetEntitlements.self, .init(session: session)) }
            }
        }
        driver.print(report)
        for c in fulfillment + catalogs { await c.close() }
    }
}

/// Fills a fulfillment database directly (not through RPC) for the scale scenario: `accounts` accounts,
/// each with one granted purchase (processed transaction, ownership, grant) and spends, up to
/// `ledgerRows` ledger rows in all; wallets consistent with their ledgers. Run it against the data
/// directory of a running (idle) fulfillment-service, then rerun `redeem` and `spend`.
struct PreloadBenchmark: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "preload",
        abstract: "Bulk-load a fulfillment database for the scale scenario (not through RPC).")
    @Option(name: .customLong("data-dir"), help: "The fulfillment service's data directory.") var dataDir = "data"
    @Option(help: "Accounts to create.") var accounts = 200_000
    @Option(name: .customLong("ledger-rows"), help: "Ledger rows in all (at least one grant per account).") var ledgerRows = 1_000_000

    func run() async throws {
        guard ledgerRows >= accounts else { throw ValidationError("--ledger-rows must be at least --accounts") }
        let started = Date()
        let inserted = try FulfillmentPreload.run(
            path: URL(fileURLWithPath: dataDir).appendingPathComponent("fulfillment.sqlite").path,
            accounts: accounts, ledgerRows: ledgerRows)
        print(String(format: "preloaded %d accounts, %d ledger rows in %.1f s", accounts, inserted, Date().timeIntervalSince(started)))
    }
}
