import FulfillmentService
import IAPProtocol
import JSONRPC
import RPCTestSupport
import RPCTransport
import ServiceSupport
import SuiteTestSupport
import Testing

/// The reasons a caller acts on (`RPCErrorReason`), checked on both sides of the boundary over real TCP: the side
/// that sets each one, and the side that matches it. Fulfillment once matched verification's "not configured" by
/// a string its own client wrapper had already replaced, and refunds stayed pending for ever.
@Suite struct ErrorReasonContractTests {
    @Test func verificationSaysAppleCannotBeAskedAndFulfillmentsClientPassesItOn() async throws {
        try await SuiteFixture.with(appStoreAPI: false) { suite in
            // Verification's side: its own answer.
            let verification = RPCClient(host: "127.0.0.1", port: suite.verificationPort, configuration: .patient)
            defer { Task { await verification.close() } }
            do {
                _ = try await verification.call(
                    VerificationTransactionInfo.self, .init(internalToken: SuiteFixture.internalToken, transactionId: "1"))
                Issue.record("answered without an App Store Server API")
            } catch let error as RPCError {
                #expect(error.has(.appStoreAPINotConfigured) && error.knownCode == .unavailable && !error.retryable, "\(error)")
            }
            // Fulfillment's side: its dependency client hands the same reason on, not a dependency outage.
            // A patient deadline: the reason is the point, and a loaded machine missed the three seconds once.
            let dependencies = try Dependencies(
                accounts: suite.accounts.address, verification: "127.0.0.1:\(suite.verificationPort)", catalog: suite.catalog.address,
                deadline: .seconds(30))
            defer { Task { await dependencies.close() } }
            do {
                _ = try await dependencies.transactionInfo("1", internalToken: SuiteFixture.internalToken)
                Issue.record("answered without an App Store Server API")
            } catch let error as RPCError {
                #expect(error.has(.appStoreAPINotConfigured), "\(error)")
            }
            do {
                _ = try await dependencies.transactionHistory("1", internalToken: SuiteFixture.internalToken)
                Issue.record("answered without an App Store Server API")
            } catch let error as RPCError {
                #expect(error.has(.appStoreAPINotConfigured), "\(error)")
            }
            // A service that cannot be reached is a dependency outage (retryable), named as such.
            await suite.stopService("verification")
            do {
                _ = try await dependencies.transactionInfo("1", internalToken: SuiteFixture.internalToken)
                Issue.record("answered with verification down")
            } catch let error as RPCError {
                #expect(error.has(.dependencyUnavailable) && error.retryable, "\(error)")
            }
        }
    }

    static func refusal(_ gate: TokenGate, _ presented: String?) -> RPCError? {
        do {
            try gate.check(presented, configured: "right", previous: nil)
            return nil
        } catch {
            return error
        }
    }

    static func pingFailure(_ client: RPCClient) async -> RPCError? {
        do {
            _ = try await client.call(RPCPing.self, EmptyParams())
            return nil
        } catch {
            return error
        }
    }

    @Test func theTransportAndTheTokenGatesSetTheReasonsTheCLIMatches() async throws {
        let dead = RPCClient(host: "127.0.0.1", port: try LoopbackPort.free(), configuration: .init(connections: 1))
        let failure = await Self.pingFailure(dead)
        #expect(failure?.has(.connectFailed) == true, "\(String(describing: failure))")
        await dead.close()
        for (gate, reason) in [(TokenGate.admin, RPCErrorReason.adminTokenRequired), (.internal, .internalTokenRequired)] {
            for presented in ["wrong", nil] as [String?] {
                let refused = Self.refusal(gate, presented)
                #expect(refused?.has(reason) == true && refused?.knownCode == .forbidden, "\(gate) \(presented ?? "nothing")")
            }
        }
    }
}
