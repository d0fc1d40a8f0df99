import AppStoreServerAPI
import AppStoreSimulator
import Foundation
import IAPProtocol
import JSONRPC
import Testing

/// Extend Subscription Renewal Dates for All Active Subscribers and its status over real HTTP, through the shared client
/// and the simulator: every active subscriber of the product extended once, expired ones and other products left alone,
/// one at Apple's limit of extensions counted as failed, the same request identifier not carried out twice, Apple's refusals.
@Suite struct AppStoreServerAPIMassExtensionTests {
    typealias API = AppStoreServerAPITests
    typealias Blocking = AppStoreServerAPISubscriptionTests
    static let day: Int64 = 86_400_000

    @Test func everyActiveSubscriberIsExtendedOnceAndTheCountsAreApples() async throws {
        try await API.serve { served in
            let sim = served.simulator
            let client = try served.client()
            var subs: [String: SimPurchase.Result] = [:]
            for name in ["ann", "bob", "cid", "dee"] { subs[name] = try await API.buy(sim, "sub.mass", .autoRenewable, appleId: "\(name)@icloud") }
            let other = try await API.buy(sim, "sub.other", .autoRenewable, appleId: "ann@icloud")
            // cid lets it lapse; dee has had Apple's two extensions already.
            let cid = subs["cid"]!.transactionId
            _ = try await Blocking.blocking { try sim.setAutoRenew(.init(appleId: "cid@icloud", transactionId: cid, enabled: false)) }
            _ = try await Blocking.blocking { try sim.advanceClock(.init(seconds: 31 * 86_400)) }
            for i in 1...2 {
                _ = try await client.extendRenewalDate(
                    originalTransactionId: subs["dee"]!.originalTransactionId, days: 1, reasonCode: 1, requestIdentifier: "dee-\(i)")
            }
            func expires(_ name: String, _ purchase: SimPurchase.Result? = nil) async throws -> Int64? {
                let t = purchase ?? subs[name]!
                return try await client.subscriptionStatuses(t.transactionId).first { $0.originalTransactionId == t.originalTransactionId }?
                    .transaction.payload["expiresDate"]?.intValue
            }
            var before: [String: Int64] = [:]
            for name in ["ann", "bob", "cid", "dee"] { before[name] = try await expires(name) }
            let otherBefore = try await expires("ann", other)

            let id = UUID().uuidString.lowercased()
            #expect(
                try await client.massExtendRenewalDate(
                    .production, productId: "sub.mass", days: 5, reasonCode: 3, requestIdentifier: id, storefronts: nil)
                    == id)
            _ = try await Blocking.blocking { try sim.completeMassExtensions() }
            let status = try await client.massExtensionStatus(.production, productId: "sub.mass", requestIdentifier: id)
            #expect(status.complete && status.succeededCount == 2 && status.failedCount == 1 && status.completeDateMs != nil, "\(status)")
            for name in ["ann", "bob"] { #expect(try await expires(name) == before[name]! + 5 * Self.day, "\(name) extended by 5 days") }
            #expect(try await expires("cid") == before["cid"]!, "an expired subscription is left alone")
            #expect(try await expires("dee") == before["dee"]!, "one at Apple's limit is a failure, unchanged")
            #expect(try await expires("ann", other) == otherBefore, "another product is left alone")

            // The same request again: the same answer, carried out once.
            #expect(
                try await client.massExtendRenewalDate(
                    .production, productId: "sub.mass", days: 5, reasonCode: 3, requestIdentifier: id, storefronts: nil)
                    == id)
            _ = try await Blocking.blocking { try sim.completeMassExtensions() }
            #expect(try await expires("ann") == before["ann"]! + 5 * Self.day)
            // Another storefront's subscribers only: none of the simulator's (all USA).
            let elsewhere = UUID().uuidString.lowercased()
            _ = try await client.massExtendRenewalDate(
                .production, productId: "sub.mass", days: 5, reasonCode: 3, requestIdentifier: elsewhere, storefronts: ["FRA"])
            _ = try await Blocking.blocking { try sim.completeMassExtensions() }
            let none = try await client.massExtensionStatus(.production, productId: "sub.mass", requestIdentifier: elsewhere)
            #expect(none.complete && none.succeededCount == 0 && none.failedCount == 0)

            // Apple's refusals.
            let bearer = try API.token(served.key)
            let url = served.base + "/inApps/v1/subscriptions/extend/mass"
            func body(_ fields: String) -> String {
                #"{"productId":"sub.mass","extendByDays":5,"extendReasonCode":3,"requestIdentifier":"\#(UUID().uuidString)"\#(fields)}"#
            }
            let refusals: [(String, Int64)] = [
                (body(#","extendByDays":91"#).replacingOccurrences(of: #""extendByDays":5,"#, with: ""), 4_000_009),
                (body(#","extendReasonCode":4"#).replacingOccurrences(of: #""extendReasonCode":3,"#, with: ""), 4_000_010),
                (#"{"productId":"sub.mass","extendByDays":5,"extendReasonCode":3,"requestIdentifier":"not-a-uuid"}"#, 4_000_011),
                (#"{"productId":"","extendByDays":5,"extendReasonCode":3,"requestIdentifier":"\#(UUID().uuidString)"}"#, 4_000_023),
                (body(#","storefrontCountryCodes":[]"#), 4_000_027),
                (body(#","storefrontCountryCodes":["US"]"#), 4_000_028),
            ]
            for (json, code) in refusals {
                let refused = try await Blocking.send(.POST, url, token: bearer, body: json)
                #expect(refused.status == 400 && refused.body?["errorCode"]?.intValue == code, "\(json)")
            }
            await #expect(
                throws: AppStoreAPIError.api(
                    httpStatus: 404, errorCode: 4_040_009,
                    message:
                        "The server didn't find a subscription-renewal-date extension request for this requestIdentifier and productId combination.")
            ) {
                _ = try await client.massExtensionStatus(.production, productId: "sub.other", requestIdentifier: id)
            }
        }
    }
}
