import Foundation
import IAPProtocol
import JSONRPC
import RPCTestSupport
import ServiceSupport
import SuiteTestSupport
import Testing

/// One content directory serves both scopes, and a signed URL is as good as the paid file: a free TestFlight
/// (Sandbox) purchase used to unlock the production download. Sandbox entitlements unlock content only with
/// `--sandbox-content` (the development stack's), and the URL names the scope that granted it.
@Suite struct SandboxContentTests {

    @Test(arguments: [false, true]) func sandboxEntitlementsUnlockContentOnlyWithSandboxContent(sandboxContent: Bool) async throws {
        try await SuiteFixture.with(configure: {
            $0.sandboxContent = sandboxContent
            $0.contentURLSigner = ContentURLSigner(key: EdgeFixture.contentKey)
        }) { suite in
            let tester = try await suite.register("tester")
            let pack = try await suite.buy("tester@icloud", "pack.castle", environment: .sandbox)
            let redeemed = try await suite.redeem(tester.session, signed: [pack.signedTransaction])
            #expect(redeemed.results.map(\.outcome) == [.granted])
            let read = await rpcError {
                _ = try await suite.fulfillment.call(
                    FulfillmentReadContent.self,
                    .init(session: tester.session, contentId: SuiteFixture.contentId, offset: 0, length: 16, environment: .sandbox))
            }
            var url: FulfillmentContentURL.Result?
            let signed = await rpcError {
                url = try await suite.fulfillment.call(
                    FulfillmentContentURL.self, .init(session: tester.session, contentId: SuiteFixture.contentId, environment: .sandbox))
            }
            if sandboxContent {
                #expect(read == nil && signed == nil)
                #expect(url?.url.contains("&env=Sandbox&") == true, "the URL says which scope granted it: \(String(describing: url))")
            } else {
                #expect(read?.has(.sandboxContentDisabled) == true, "\(String(describing: read))")
                #expect(signed?.has(.sandboxContentDisabled) == true, "\(String(describing: signed))")
                // The production scope has no entitlement: nothing there either.
                #expect(try await suite.fulfillment.call(FulfillmentListContent.self, .init(session: tester.session)).content.isEmpty)
            }
        }
    }
}
