import IAPProtocol
import JSONRPC
import Testing

@testable import VerificationService

/// The field checks of a Get Retention Message request once its signature verified: Apple's decoded fields, a known
/// environment, and in Production the app's own appAppleId.
@Suite struct RealtimeRequestTests {
    static func payload(environment: String = "Production", appAppleId: Int64 = 1_234_567_890, requestIdentifier: String? = nil) -> JSONValue {
        .object([
            "originalTransactionId": "2000000000000001", "appAppleId": .int(appAppleId), "productId": "sub.premium", "userLocale": "en-US",
            "requestIdentifier": .string(requestIdentifier ?? "7B0C2E1A-5D3F-4C8B-9A6E-1F2D3C4B5A69"), "environment": .string(environment),
            "signedDate": .int(1_700_000_000_000),
        ])
    }

    @Test func productionRequestsMustNameThisAppAndTheSandboxIsNotAsked() {
        let ok = VerificationService.realtimeRequest(Self.payload(), appAppleId: 1_234_567_890)
        #expect(ok.status == 0 && ok.request?.requestIdentifier == "7b0c2e1a-5d3f-4c8b-9a6e-1f2d3c4b5a69")
        #expect(VerificationService.realtimeRequest(Self.payload(appAppleId: 42), appAppleId: 1_234_567_890).reason == "appAppleIdMismatch")
        #expect(VerificationService.realtimeRequest(Self.payload(), appAppleId: nil).reason == "appAppleIdNotConfigured")
        #expect(VerificationService.realtimeRequest(Self.payload(environment: "Sandbox", appAppleId: 42), appAppleId: 1_234_567_890).status == 0)
        #expect(VerificationService.realtimeRequest(Self.payload(environment: "Xcode"), appAppleId: 1_234_567_890).reason == "unknownEnvironment")
        #expect(VerificationService.realtimeRequest(Self.payload(requestIdentifier: "nope"), appAppleId: 1_234_567_890).reason == "malformed")
    }
}
