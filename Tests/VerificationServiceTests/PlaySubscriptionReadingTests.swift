import Foundation
import IAPProtocol
import JSONRPC
import PlayDeveloperAPI
import Testing

@testable import VerificationService

/// Which line item of a SubscriptionPurchaseV2 holds the access, in the shapes Google's subscriptions page documents for a
/// DEFERRED plan change: the new purchase token lists the replaced plan's item (not renewing, with
/// `deferredItemReplacement`, ending at the old period's end) and the new plan's (no expiry until it takes over); after the
/// switch the replaced item's expiry is in the past and the new one's in the future. Google documents no order of the items.
struct PlaySubscriptionReadingTests {
    static let may1 = "2026-05-01T00:00:00Z", june1 = "2026-06-01T00:00:00Z", april1 = "2026-04-01T00:00:00Z"

    static func item(_ productId: String, expiry: String?, replacedBy: String? = nil, order: String? = nil) -> String {
        var fields = [#""productId": "\#(productId)""#, #""offerDetails": {"basePlanId": "monthly"}"#]
        if let expiry { fields.append(#""expiryTime": "\#(expiry)""#) }
        if let replacedBy { fields.append(#""deferredItemReplacement": {"productId": "\#(replacedBy)"}"#) }
        if let order { fields.append(#""latestSuccessfulOrderId": "\#(order)""#) }
        return "{" + fields.joined(separator: ", ") + "}"
    }

    static func read(_ items: [String], named productId: String?) throws -> VerifiedPlayPurchase? {
        let json = try JSONValue(
            parsing: Array(
                #"{"subscriptionState": "SUBSCRIPTION_STATE_ACTIVE", "startTime": "\#(april1)", "linkedPurchaseToken": "old", "lineItems": [\#(items.joined(separator: ", "))]}"#
                    .utf8))
        return PlayPurchaseReading.read(
            json, packageName: "com.example",
            reference: .init(internalToken: "t", packageName: nil, productId: productId, purchaseToken: "new", kind: .subscription))
    }

    @Test func aDeferredPlanChangeReadsTheReplacedPlanUntilTheSwitchThenTheNewOne() throws {
        let pending = [
            Self.item("sub.premium", expiry: Self.may1, replacedBy: "sub.basic", order: "GPA.1"), Self.item("sub.basic", expiry: nil),
        ]
        for items in [pending, pending.reversed()] {
            for named in ["sub.basic", "sub.premium", nil] {
                let read = try #require(try Self.read(items, named: named))
                #expect(read.productId == "sub.premium" && read.expiryTimeMs == GoogleDateTime.milliseconds(Self.may1), "\(named ?? "none")")
                #expect(read.orderId == "GPA.1" && read.entitles)
            }
        }
        let switched = [
            Self.item("sub.premium", expiry: Self.may1, order: "GPA.1"), Self.item("sub.basic", expiry: Self.june1, order: "GPA.2..0"),
        ]
        for items in [switched, switched.reversed()] {
            for named in ["sub.basic", "sub.premium", nil] {
                let read = try #require(try Self.read(items, named: named))
                #expect(read.productId == "sub.basic" && read.expiryTimeMs == GoogleDateTime.milliseconds(Self.june1), "\(named ?? "none")")
                #expect(read.orderId == "GPA.2..0")
            }
        }
    }

    /// Items ending together (a subscription with add-ons): the one named, else the first.
    @Test func amongItemsEndingTogetherTheNamedOneIsRead() throws {
        let items = [Self.item("sub.base", expiry: Self.may1, order: "GPA.1"), Self.item("sub.addon", expiry: Self.may1, order: "GPA.1")]
        #expect(try Self.read(items, named: "sub.addon")?.productId == "sub.addon")
        #expect(try Self.read(items, named: "sub.base")?.productId == "sub.base")
        #expect(try Self.read(items, named: nil)?.productId == "sub.base")
        #expect(try Self.read([Self.item("sub.base", expiry: nil)], named: nil)?.productId == "sub.base")
    }
}
