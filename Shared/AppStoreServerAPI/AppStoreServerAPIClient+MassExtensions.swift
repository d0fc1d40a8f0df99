import IAPProtocol
import JSONRPC

extension AppStoreServerAPIClient {
    /// Extend Subscription Renewal Dates for All Active Subscribers of `productId` in one environment (Apple carries it
    /// out afterwards: RENEWAL_EXTENDED per subscription, RENEWAL_EXTENSION / SUMMARY at the end). The same
    /// `requestIdentifier` (a UUID) again is the same request. Answers Apple's `requestIdentifier`.
    public func massExtendRenewalDate(
        _ environment: AppleEnvironment, productId: String, days: Int, reasonCode: Int, requestIdentifier: String, storefronts: [String]?
    ) async throws -> String {
        var body: [String: JSONValue] = [
            "productId": .string(productId), "extendByDays": .int(Int64(days)), "extendReasonCode": .int(Int64(reasonCode)),
            "requestIdentifier": .string(requestIdentifier),
        ]
        if let storefronts { body["storefrontCountryCodes"] = .array(storefronts.map(JSONValue.string)) }
        let answer = try await send(.POST, base(environment) + "/inApps/v1/subscriptions/extend/mass", body: .object(body))
        guard let id = answer?["requestIdentifier"]?.stringValue else { throw AppStoreAPIError.malformedResponse }
        return id
    }

    /// Get Status of Subscription Renewal Date Extensions.
    public func massExtensionStatus(_ environment: AppleEnvironment, productId: String, requestIdentifier: String) async throws
        -> MassExtensionStatus
    {
        let answer = try await get(
            base(environment) + "/inApps/v1/subscriptions/extend/mass/" + Self.escaped(productId) + "/" + Self.escaped(requestIdentifier))
        guard let id = answer["requestIdentifier"]?.stringValue, let complete = answer["complete"]?.boolValue else {
            throw AppStoreAPIError.malformedResponse
        }
        return MassExtensionStatus(
            requestIdentifier: id, complete: complete, completeDateMs: answer["completeDate"]?.millisecondsValue,
            succeededCount: answer["succeededCount"]?.intValue, failedCount: answer["failedCount"]?.intValue)
    }
}
