import AppStoreSimulator
import Foundation
import IAPProtocol
import JSONRPC
import Logging
import RPCTestSupport
import RPCTransport
import Receipts
import ServiceSupport
import Testing
import VerificationService
import X509

/// A simulator and two verification services (one trusting the simulator's roots via
/// sim.trustAnchor, one trusting only Apple's), all over real TCP.
final class SimulatorFixture: Sendable {
    let directory: URL
    let sim: RPCServer
    let client: RPCClient
    let trusting: RPCClient
    let appleOnly: RPCClient
    private let servers: [RPCServer]

    static func start(directory: URL? = nil) async throws -> SimulatorFixture {
        let dir = directory ?? FileManager.default.temporaryDirectory.appendingPathComponent("sim-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        var quiet = Logger(label: "sim-test")
        quiet.logLevel = .critical
        let simulator = try AppStoreSimulator(directory: dir)
        let sim = RPCServer(configuration: .init(serviceName: "appstore-sim"), router: simulator.router(), logger: quiet)
        try await sim.start()
        let client = RPCClient(host: "127.0.0.1", port: sim.localPort!, configuration: .patient)
        let anchors = try await client.call(SimTrustAnchor.self, EmptyParams())
        var trustingConfig = VerificationConfiguration()
        trustingConfig.bundleIds = ["com.example.game"]
        trustingConfig.extraRoots = try [anchors.receiptRoot, anchors.jwsRoot].map {
            try Certificate(derEncoded: Array(Data(base64Encoded: $0)!))
        }
        let trusting = RPCServer(
            configuration: .init(serviceName: "verification"),
            router: VerificationService(configuration: trustingConfig).router(), logger: quiet)
        let appleOnly = RPCServer(
            configuration: .init(serviceName: "verification"),
            router: VerificationService(
                configuration: {
                    var c = VerificationConfiguration(); c.bundleIds = ["com.example.game"]; return c
                }()
            ).router(), logger: quiet)
        try await trusting.start()
        try await appleOnly.start()
        return SimulatorFixture(
            directory: dir, sim: sim, client: client, servers: [sim, trusting, appleOnly],
            trusting: RPCClient(host: "127.0.0.1", port: trusting.localPort!, configuration: .patient),
            appleOnly: RPCClient(host: "127.0.0.1", port: appleOnly.localPort!, configuration: .patient))
    }

    private init(directory: URL, sim: RPCServer, client: RPCClient, servers: [RPCServer], trusting: RPCClient, appleOnly: RPCClient) {
        self.directory = directory
        self.sim = sim
        self.client = client
        self.servers = servers
        self.trusting = trusting
        self.appleOnly = appleOnly
    }

    func stop() async {
        for c in [client, trusting, appleOnly] { await c.close() }
        for s in servers { await s.shutdown() }
    }

    func buy(
        _ product: String, _ type: ProductType, appleId: String = "alice@example.com", device: String? = nil,
        token: String? = nil, receipt: SimReceiptOptions? = nil
    ) async throws -> SimPurchase.Result {
        try await client.call(
            SimPurchase.self,
            .init(
                appleId: appleId, bundleId: "com.example.game", productId: product,
                productType: type, deviceIdentifier: device, appAccountToken: token,
                receipt: receipt))
    }

    /// The receipt's in-app entries as the trusting verification service decodes them.
    func inApp(_ receiptData: String, device: String? = nil) async throws -> [InAppPurchase] {
        let answer = try await trusting.call(VerificationVerifyReceipt.self, .init(receiptData: receiptData, deviceIdentifier: device))
        #expect(answer.status == 0, "receipt refused: \(answer.reason ?? "")")
        return answer.receipt?.inApp ?? []
    }
}

@Suite struct SimulatorTests {
    @Test func receiptsAndJWSVerifyWithTheSimulatorsRootsOnly() async throws {
        let f = try await SimulatorFixture.start()
        defer { Task { await f.stop() } }
        let device = "E621E1F8-C36C-495A-93FC-0C247A3E6E5F"
        let token = "7e3fb20b-4cdb-47cc-936d-99d65f608138"
        let bought = try await f.buy("coins.100", .consumable, device: device, token: token)
        let trusted = try await f.trusting.call(
            VerificationVerifyReceipt.self,
            .init(
                receiptData: bought.receiptData, expectedBundleId: "com.example.game",
                deviceIdentifier: device))
        #expect(trusted.status == 0)
        #expect(trusted.environment == "Production")  // the simulator's default purchases are Production
        #expect(trusted.receipt?.inApp.map(\.transactionId) == [bought.transactionId])
        // The device identifier flowed into the receipt's hash: another device fails.
        let otherDevice = try await f.trusting.call(
            VerificationVerifyReceipt.self,
            .init(receiptData: bought.receiptData, deviceIdentifier: UUID().uuidString))
        #expect(otherDevice.reason == "deviceMismatch")
        let refused = try await f.appleOnly.call(VerificationVerifyReceipt.self, .init(receiptData: bought.receiptData))
        #expect(refused.status == 21003)
        #expect(refused.reason == "untrustedChain")

        let jws = try await f.trusting.call(VerificationVerifyTransaction.self, .init(signedTransaction: bought.signedTransaction))
        #expect(jws.status == 0)
        #expect(jws.transaction?["transactionId"]?.stringValue == bought.transactionId)
        #expect(jws.transaction?["appAccountToken"]?.stringValue == token)
        #expect(jws.transaction?["type"]?.stringValue == "Consumable")
        let jwsRefused = try await f.appleOnly.call(VerificationVerifyTransaction.self, .init(signedTransaction: bought.signedTransaction))
        #expect(jwsRefused.reason == "untrustedChain")
    }

    @Test func signingOptionsForNegativeTests() async throws {
        let f = try await SimulatorFixture.start()
        defer { Task { await f.stop() } }
        let sha1 = try await f.buy("coins.100", .consumable, receipt: .init(digest: .sha1))
        let container = try ReceiptContainer.parse(Array(Data(base64Encoded: sha1.receiptData)!))
        #expect(container.signer.digestAlgorithm == "1.3.14.3.2.26")
        _ = try await f.inApp(sha1.receiptData)
        let expired = try await f.buy("coins.100", .consumable, receipt: .init(signing: .expiredChain))
        #expect(try await f.trusting.call(VerificationVerifyReceipt.self, .init(receiptData: expired.receiptData)).reason == "untrustedChain")
        let untrusted = try await f.buy("coins.100", .consumable, receipt: .init(signing: .untrustedChain))
        #expect(try await f.trusting.call(VerificationVerifyReceipt.self, .init(receiptData: untrusted.receiptData)).reason == "untrustedChain")
    }

    @Test func aConsumableVanishesFromTheReceiptOnceFinished() async throws {
        let f = try await SimulatorFixture.start()
        defer { Task { await f.stop() } }
        let coins = try await f.buy("coins.100", .consumable)
        let pack = try await f.buy("levels.pack1", .nonConsumable)
        #expect(Set(try await f.inApp(pack.receiptData).map(\.transactionId)) == [coins.transactionId, pack.transactionId])
        _ = try await f.client.call(SimFinishTransaction.self, .init(appleId: "alice@example.com", transactionId: coins.transactionId))
        _ = try await f.client.call(SimFinishTransaction.self, .init(appleId: "alice@example.com", transactionId: pack.transactionId))
        let receipt = try await f.client.call(SimReceipt.self, .init(appleId: "alice@example.com", bundleId: "com.example.game"))
        // The finished non-consumable stays; the finished consumable is gone.
        #expect(try await f.inApp(receipt.receiptData).map(\.transactionId) == [pack.transactionId])
        // Another Apple ID cannot finish (or see) Alice's transactions.
        let error = await rpcError {
            try await f.client.call(SimFinishTransaction.self, .init(appleId: "mallory@example.com", transactionId: coins.transactionId))
        }
        #expect(error?.knownCode == .notFound)
    }

    @Test func restoreCreatesNewTransactionsForTheSameOriginals() async throws {
        let f = try await SimulatorFixture.start()
        defer { Task { await f.stop() } }
        let pack = try await f.buy("levels.pack1", .nonConsumable)
        let sub = try await f.buy("pro.monthly", .autoRenewable)
        _ = try await f.buy("coins.100", .consumable)
        _ = try await f.buy("season.pass", .nonRenewing)
        let restored = try await f.client.call(SimRestore.self, .init(appleId: "alice@example.com", bundleId: "com.example.game"))
        #expect(restored.signedTransactions.count == 2)  // not the consumable, not the non-renewing pass
        var originals: Set<String> = []
        for jws in restored.signedTransactions {
            let t = try await f.trusting.call(VerificationVerifyTransaction.self, .init(signedTransaction: jws)).transaction!
            #expect(![pack.transactionId, sub.transactionId].contains(t["transactionId"]!.stringValue!))
            originals.insert(t["originalTransactionId"]!.stringValue!)
        }
        #expect(originals == [pack.originalTransactionId, sub.originalTransactionId])
        // Restoring twice: yet more new ids, still the same originals.
        let again = try await f.client.call(SimRestore.self, .init(appleId: "alice@example.com", bundleId: "com.example.game"))
        let entries = try await f.inApp(again.receiptData)
        #expect(Set(entries.filter { $0.productId == "levels.pack1" }.map(\.originalTransactionId)) == [pack.originalTransactionId])
        #expect(entries.filter { $0.productId == "levels.pack1" }.count == 3)
    }

    @Test func rebuyingAnOwnedNonConsumableIsARegularTransactionForTheSameOriginal() async throws {
        let f = try await SimulatorFixture.start()
        defer { Task { await f.stop() } }
        let first = try await f.buy("levels.pack1", .nonConsumable)
        let second = try await f.buy("levels.pack1", .nonConsumable)
        #expect(second.transactionId != first.transactionId)
        #expect(second.originalTransactionId == first.originalTransactionId)
        let t = try await f.trusting.call(VerificationVerifyTransaction.self, .init(signedTransaction: second.signedTransaction)).transaction!
        #expect(t["transactionReason"]?.stringValue == "PURCHASE")
        // Another Apple ID buying it gets its own original.
        let bob = try await f.buy("levels.pack1", .nonConsumable, appleId: "bob@example.com")
        #expect(bob.originalTransactionId == bob.transactionId)
    }

    /// Family Sharing: a member's transaction is their own (FAMILY_SHARED); restoring it does not make them another
    /// member, buying the product makes a purchase of their own, and the purchaser's refund revokes the shared one with its
    /// restored copies, so a restore after it brings back only what the member bought. A member's transaction is never
    /// refunded or reversed itself.
    @Test func aFamilyMembersSharedTransactionIsTheirOwnUntilThePurchasersRefund() async throws {
        let f = try await SimulatorFixture.start()
        defer { Task { await f.stop() } }
        let pack = try await f.buy("levels.pack1", .nonConsumable)
        let shared = try await f.client.call(
            SimShareWithFamily.self, .init(appleId: "alice@example.com", transactionId: pack.transactionId, memberAppleId: "bob@example.com"))
        let t = try await f.trusting.call(VerificationVerifyTransaction.self, .init(signedTransaction: shared.signedTransaction)).transaction!
        #expect(t["inAppOwnershipType"]?.stringValue == "FAMILY_SHARED" && t["originalTransactionId"]?.stringValue == shared.transactionId)
        func restore(_ appleId: String) async throws -> [JSONValue] {
            var out: [JSONValue] = []
            for jws in try await f.client.call(SimRestore.self, .init(appleId: appleId, bundleId: "com.example.game")).signedTransactions {
                out.append(try await f.trusting.call(VerificationVerifyTransaction.self, .init(signedTransaction: jws)).transaction!)
            }
            return out
        }
        for _ in 0..<5 { #expect(try await restore("bob@example.com").count == 1) }
        // Five restores of bob's are still one member: four more may join.
        for member in ["carol", "dan", "erin", "fay"] {
            _ = try await f.client.call(
                SimShareWithFamily.self,
                .init(appleId: "alice@example.com", transactionId: pack.transactionId, memberAppleId: "\(member)@example.com"))
        }
        let own = try await f.buy("levels.pack1", .nonConsumable, appleId: "bob@example.com")
        #expect(own.originalTransactionId == own.transactionId, "bob's own purchase, not a copy of the shared one")
        await #expect(throws: RPCError.self) {
            try await f.client.call(SimRefundDecision.self, .init(appleId: "bob@example.com", transactionId: shared.transactionId, event: .request))
        }
        _ = try await f.client.call(SimRefund.self, .init(appleId: "alice@example.com", transactionId: pack.transactionId))
        let after = try await restore("bob@example.com")
        #expect(after.map { $0["originalTransactionId"]?.stringValue } == [own.originalTransactionId])
        #expect(after.map { $0["inAppOwnershipType"]?.stringValue } == ["PURCHASED"])
    }

    @Test func subscriptionsRenewAsTheClockPassesTheirPeriod() async throws {
        let f = try await SimulatorFixture.start()
        defer { Task { await f.stop() } }
        let sub = try await f.buy("pro.monthly", .autoRenewable)
        let firstExpiry = try await f.inApp(sub.receiptData).first!.expiresDateMs.flatMap { Int64($0) }!
        let early = try await f.client.call(SimAdvanceClock.self, .init(seconds: 29 * 86_400))
        #expect(early.renewals == 0)
        let passed = try await f.client.call(SimAdvanceClock.self, .init(seconds: 32 * 86_400))  // day 61: two periods
        #expect(passed.renewals == 2)
        let receipt = try await f.client.call(SimReceipt.self, .init(appleId: "alice@example.com", bundleId: "com.example.game"))
        let entries = try await f.inApp(receipt.receiptData)
        #expect(entries.count == 3)
        #expect(Set(entries.map(\.originalTransactionId)) == [sub.originalTransactionId])
        #expect(Set(entries.map(\.transactionId)).count == 3)
        let expiries = entries.compactMap { $0.expiresDateMs.flatMap { Int64($0) } }.sorted()
        #expect(expiries == [firstExpiry, firstExpiry + 30 * 86_400_000, firstExpiry + 60 * 86_400_000])
    }

    @Test func aRefundSetsTheCancellationDateAndStopsRenewals() async throws {
        let f = try await SimulatorFixture.start()
        defer { Task { await f.stop() } }
        let sub = try await f.buy("pro.monthly", .autoRenewable)
        let refund = try await f.client.call(SimRefund.self, .init(appleId: "alice@example.com", transactionId: sub.transactionId))
        let receipt = try await f.client.call(SimReceipt.self, .init(appleId: "alice@example.com", bundleId: "com.example.game"))
        #expect(try await f.inApp(receipt.receiptData).first?.cancellationDateMs != nil)
        let notification = try await f.trusting.call(VerificationVerifyNotification.self, .init(signedPayload: refund.signedPayload!))
        #expect(notification.status == 0)
        #expect(notification.notification?["notificationType"]?.stringValue == "REFUND")
        #expect(notification.notification?["data"]?["transactionInfo"]?["revocationDate"]?.intValue != nil)
        #expect(try await f.client.call(SimAdvanceClock.self, .init(seconds: 90 * 86_400)).renewals == 0)
        #expect(
            await rpcError { try await f.client.call(SimRefund.self, .init(appleId: "alice@example.com", transactionId: sub.transactionId)) }?
                .reason == "alreadyRefunded")
    }

    /// A purchase's environment is fixed when it is made: its JWS, its receipt and its refund notification
    /// all say the same, and a receipt of the other environment does not hold it.
    @Test func aPurchasesEnvironmentIsFixedWhenItIsMade() async throws {
        let f = try await SimulatorFixture.start()
        defer { Task { await f.stop() } }
        for environment in [SimEnvironment.production, .sandbox] {
            let appleId = "env-\(environment.rawValue)@example.com"
            let bought = try await f.client.call(
                SimPurchase.self,
                .init(
                    appleId: appleId, bundleId: "com.example.game", productId: "levels.pack1",
                    productType: .nonConsumable, environment: environment))
            #expect(bought.environment == environment.appleName)
            let jws = try await f.trusting.call(VerificationVerifyTransaction.self, .init(signedTransaction: bought.signedTransaction))
            #expect(jws.environment == environment.appleName)
            let own = try await f.trusting.call(VerificationVerifyReceipt.self, .init(receiptData: bought.receiptData))
            #expect(own.environment == environment.appleName)
            #expect(own.receipt?.inApp.map(\.transactionId) == [bought.transactionId])
            let other: SimEnvironment = environment == .production ? .sandbox : .production
            let otherReceipt = try await f.client.call(
                SimReceipt.self,
                .init(
                    appleId: appleId, bundleId: "com.example.game",
                    receipt: .init(environment: other)))
            #expect(try await f.inApp(otherReceipt.receiptData).isEmpty)
            let refund = try await f.client.call(SimRefund.self, .init(appleId: appleId, transactionId: bought.transactionId))
            let notification = try await f.trusting.call(VerificationVerifyNotification.self, .init(signedPayload: refund.signedPayload!))
            #expect(notification.notification?["data"]?["environment"]?.stringValue == environment.appleName)
            #expect(notification.notification?["data"]?["transactionInfo"]?["environment"]?.stringValue == environment.appleName)
        }
    }

    @Test func thePKIOutlivesARestart() async throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("sim-\(UUID().uuidString)")
        let first = try await SimulatorFixture.start(directory: dir)
        let anchors = try await first.client.call(SimTrustAnchor.self, EmptyParams())
        let bought = try await first.buy("coins.100", .consumable)
        await first.stop()
        let second = try await SimulatorFixture.start(directory: dir)
        defer { Task { await second.stop() } }
        #expect(try await second.client.call(SimTrustAnchor.self, EmptyParams()) == anchors)
        #expect(try await second.inApp(bought.receiptData).map(\.transactionId) == [bought.transactionId])
        // The history survived too.
        let receipt = try await second.client.call(SimReceipt.self, .init(appleId: "alice@example.com", bundleId: "com.example.game"))
        #expect(try await second.inApp(receipt.receiptData).map(\.transactionId) == [bought.transactionId])
        let keyMode =
            try FileManager.default.attributesOfItem(atPath: dir.appendingPathComponent("sim-pki/receipt-leaf.key").path)[.posixPermissions] as? Int
        #expect(keyMode == 0o600)
    }

    @Test func badInputIsRefused() async throws {
        let f = try await SimulatorFixture.start()
        defer { Task { await f.stop() } }
        #expect(await rpcError { try await f.buy("", .consumable) }?.knownCode == .invalidParams)
        #expect(await rpcError { try await f.buy("coins", .consumable, token: "not-a-uuid") }?.reason == "invalidValue")
        #expect(await rpcError { try await f.client.call(SimAdvanceClock.self, .init(seconds: -1)) }?.knownCode == .invalidParams)
        #expect(await rpcError { try await f.client.call(SimRefund.self, .init(appleId: "a", transactionId: "404")) }?.knownCode == .notFound)
    }
}

@Suite struct SimulatorContractTests {
    @Test func everySimMethodKeepsItsContract() async throws {
        let failures = try await ContractHarness.run(service: "appstore-sim", declared: ContractMethods.simulator) {
            let dir = FileManager.default.temporaryDirectory.appendingPathComponent("sim-\(UUID().uuidString)")
            try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
            var quiet = Logger(label: "sim-contract")
            quiet.logLevel = .critical
            let simulator = try AppStoreSimulator(directory: dir)
            let endpoint = try VerifyReceiptEndpoint(simulator: simulator, sharedSecret: nil)
            let server = RPCServer(
                configuration: .init(serviceName: "appstore-sim"), router: simulator.router(endpoint: endpoint),
                logger: quiet)
            try await server.start()
            return ContractTarget(port: server.localPort!, stop: { await server.shutdown() })
        }
        #expect(failures.isEmpty, "\(failures.joined(separator: "\n"))")
    }
}
