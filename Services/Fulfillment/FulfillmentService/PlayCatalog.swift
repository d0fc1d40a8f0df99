import IAPProtocol
import JSONRPC

/// Which catalog product a Google Play purchase is. A catalog product is sold on Google Play under its `googlePlay` ids
/// (a Play product id, and for a subscription a base plan), or under its own id when it names none; the catalog refuses
/// two products claiming the same ids (`googlePlayIdTaken`).
struct PlayCatalogEntry: Sendable, Equatable {
    /// The catalog's product id (what is granted, recorded and shown).
    var productId: String
    /// Subscriptions: the base plan it is; nil: any base plan of the Play subscription.
    var basePlanId: String?
    var rule: GrantRule

    var isSubscription: Bool { if case .subscription = rule { true } else { false } }

    /// The entry of the base plan Google answered, else the one for any base plan; nil: the catalog sells none of it.
    static func choose(_ entries: [PlayCatalogEntry], basePlanId: String?) -> PlayCatalogEntry? {
        entries.first { $0.basePlanId != nil && $0.basePlanId == basePlanId } ?? entries.first { $0.basePlanId == nil }
    }
}

extension FulfillmentService {
    /// For each Play product id, the catalog products Google Play sells under it, with what each grants: remembered as
    /// long as the grant rules are (`--catalog-cache-ms`), so a burst of Google's pushes asks the catalog once.
    func playCatalog(_ playIds: [String]) async throws(RPCError) -> [String: [PlayCatalogEntry]] {
        try await playCatalogCache.values(for: playIds) { wanted throws(RPCError) in
            var out: [String: [PlayCatalogEntry]] = [:]
            for product in try await dependencies.playProducts(wanted).products {
                let playId = product.googlePlay?.productId ?? product.productId
                guard wanted.contains(playId) else { continue }
                out[playId, default: []].append(
                    PlayCatalogEntry(productId: product.productId, basePlanId: product.googlePlay?.basePlanId, rule: GrantRule(product)))
            }
            return out
        }
    }
}
